"""An LLM agent on an OpenAI-compatible model: the demo's tools, a real model.

The only change from examples/demo.py is the model: `OpenAIModel` instead of
`ScriptedModel`. The tools, their replay declarations and the crash switch
are the demo's, so the whole crash-and-recover walkthrough works the same.

    pip install 'polyloop[openai]'

    # a local server (Ollama shown; vLLM and llama.cpp serve the same API):
    export OPENAI_BASE_URL=http://localhost:11434/v1
    export POLYLOOP_MODEL=qwen2.5:7b-instruct
    # or a hosted API: export OPENAI_API_KEY=... POLYLOOP_MODEL=...

    polyloop run examples/openai_agent.py:agent --run-id llm-1 \\
        --goal "write meeting notes to notes.txt, then collect the TODO lines in todo.txt"

No model at hand? `python examples/openai_agent.py --fake` starts a scripted
OpenAI-compatible server on 127.0.0.1 (`polyloop.testing.FakeOpenAIServer`),
points the adapter at it and runs the agent over a real socket.

examples/anthropic_agent.py is the same agent on Anthropic's Messages API.

Every request to the model is one attempt in the log, with its token usage;
rate limits, timeouts and 5xx answers are retried as new, visible attempts
(up to `max_attempts` per step, waiting `retry_backoff` seconds, doubling).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# demo.py sits next to this file; `polyloop run` and `python examples/...`
# both put this directory on sys.path.
from demo import SCRIPT, SYSTEM, TOOLS

from polyloop import Agent, JsonlStore, PolyLoopError, default_directory, inspect_run, new_run_id


def agent() -> Agent:
    """The agent, configured from the environment when it is loaded (see `OpenAIModel`)."""
    from polyloop.openai import OpenAIModel

    model = OpenAIModel(params={"temperature": 0})
    return Agent(model=model, tools=TOOLS, system=SYSTEM, max_steps=12, max_attempts=4, retry_backoff=1.0)


async def run_and_report(built: Agent, target: str, goal: str, run_id: str, directory: str) -> int:
    """Start run `run_id` of `built` and print how it ended and what it cost."""
    store = JsonlStore(directory)
    print(f"run {run_id} on {built.model!r}", file=sys.stderr, flush=True)
    try:
        result = await built.run(goal, run_id=run_id, store=store, target=target, new=True)
    except PolyLoopError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    tokens = (await inspect_run(store, run_id)).to_json()["tokens"]
    print(f"{result.reason} after {result.steps} steps: {result.text}")
    print(f"  tokens: {tokens['input']} in, {tokens['output']} out")
    print(f"  log:    {store.path(run_id)}")
    return 0 if result.reason == "final_answer" else 1


def arguments(description: str, argv: list[str] | None) -> argparse.Namespace:
    """The example's command line: goal, run id, directory, `--fake`."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--goal", default="write meeting notes to notes.txt, then collect the TODO lines in todo.txt")
    parser.add_argument("--run-id", default=None)
    parser.add_argument("--dir", default=None, help="where run logs go (default: $POLYLOOP_DIR or ./runs)")
    parser.add_argument("--fake", action="store_true", help="serve scripted answers from 127.0.0.1 instead of a model")
    args = parser.parse_args(argv)
    args.run_id = args.run_id or new_run_id()
    args.dir = args.dir or default_directory()
    return args


def run_example(argv: list[str] | None, description: str, build: Callable[[], Agent], fake: Any) -> int:
    """Run the agent `build` makes; with `--fake`, inside `fake()`, which serves scripted answers.

    `fake()` is a context manager that sets the environment the model reads
    and yields a function saying how many requests the server answered.
    """
    args = arguments(description, argv)
    target = f"{Path(inspect.getfile(build)).resolve()}:{build.__name__}"
    if not args.fake:
        return asyncio.run(run_and_report(build(), target, args.goal, args.run_id, args.dir))
    with fake() as answered:
        code = asyncio.run(run_and_report(build(), target, args.goal, args.run_id, args.dir))
        print(f"  the fake server answered {answered()}")
    return code


@contextlib.contextmanager
def fake_openai() -> Iterator[Callable[[], str]]:
    """A fake OpenAI-compatible server that plays back the demo's decisions, as a real model's answers."""
    from polyloop.testing import FakeOpenAIServer, FakeResponse

    with FakeOpenAIServer([FakeResponse.from_json(out) for out in SCRIPT]) as server:
        os.environ.update(OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="fake", POLYLOOP_MODEL=server.model)
        yield lambda: f"{len(server.chat_requests)} chat-completions requests"


def main(argv: list[str] | None = None) -> int:
    return run_example(argv, "Run the demo's tools with an OpenAI-compatible model.", agent, fake_openai)


if __name__ == "__main__":
    raise SystemExit(main())
