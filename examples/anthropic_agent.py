"""An LLM agent on Anthropic's Messages API: the demo's tools, a real model, parallel tool calls.

The demo (examples/demo.py) with `AnthropicModel` instead of `ScriptedModel`.
The tools, their replay declarations and the crash switch are the demo's, so
the crash-and-recover walkthrough works the same.

    pip install 'polyloop[anthropic]'
    export ANTHROPIC_API_KEY=...
    export POLYLOOP_MODEL=claude-sonnet-4-5      # or ANTHROPIC_MODEL

    polyloop run examples/anthropic_agent.py:agent --run-id claude-1 \\
        --goal "write meeting notes to notes.txt, then collect the TODO lines in todo.txt"

No key at hand? `python examples/anthropic_agent.py --fake` starts a
scripted Messages API server on 127.0.0.1 (`polyloop.testing.FakeAnthropicServer`),
points the adapter at it and runs the agent over a real socket. Its script
(`SCRIPT` below) asks for two tool calls in one turn in step 3, as Claude
often does: reading the notes back and listing the workspace at once.

Every request is one attempt in the log, with its token usage (cache reads
and writes included) and the answer's `stop_reason`; rate limits (429),
overload (529), timeouts and 5xx answers are retried as new, visible
attempts (up to `max_attempts` per step, waiting at least the server's
`Retry-After`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator

# demo.py and openai_agent.py sit next to this file; `polyloop run` and
# `python examples/...` both put this directory on sys.path.
from demo import SCRIPT as DEMO_SCRIPT
from demo import SYSTEM, TOOLS
from openai_agent import run_example

from polyloop import Agent

# The demo's decisions, with steps 3 and 4's reads asked for together in one turn.
SCRIPT = [
    *DEMO_SCRIPT[:2],
    {
        "text": "Read the notes back and list the workspace, both at once.",
        "calls": [
            {"tool": "read_file", "args": {"path": "notes.txt"}},
            {"tool": "list_files", "args": {}},
        ],
        "usage": {"input_tokens": 329, "output_tokens": 41},
    },
    *DEMO_SCRIPT[3:],
]


def agent() -> Agent:
    """The agent, configured from the environment when it is loaded (see `AnthropicModel`)."""
    from polyloop.anthropic import AnthropicModel

    model = AnthropicModel(max_tokens=1024, params={"temperature": 0})
    return Agent(model=model, tools=TOOLS, system=SYSTEM, max_steps=12, max_attempts=4, retry_backoff=1.0)


@contextlib.contextmanager
def fake_anthropic() -> Iterator[Callable[[], str]]:
    """A fake Messages API server that plays `SCRIPT` back as Claude's answers."""
    from polyloop.testing import FakeAnthropicServer, FakeResponse

    with FakeAnthropicServer([FakeResponse.from_json(out) for out in SCRIPT]) as server:
        os.environ.update(ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY="fake", POLYLOOP_MODEL=server.model)
        yield lambda: f"{len(server.message_requests)} Messages API requests"


def main(argv: list[str] | None = None) -> int:
    return run_example(argv, "Run the demo's tools with an Anthropic model.", agent, fake_anthropic)


if __name__ == "__main__":
    raise SystemExit(main())
