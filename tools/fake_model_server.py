"""Serve a scripted fake model API on 127.0.0.1, to try an agent without a network or a key.

    python tools/fake_model_server.py --api openai --final "hello" --lifetime 300
    python tools/fake_model_server.py --api anthropic --script answers.jsonl

It prints the environment to set (`OPENAI_BASE_URL` or `ANTHROPIC_BASE_URL`,
and `POLYLOOP_MODEL`), then serves until its lifetime ends or Ctrl-C. A
script is a JSONL file of answers in `ScriptedModel`'s shapes
(`{"tool", "args"}`, `{"calls": [...]}`, `{"final"}`) plus `{"error": STATUS}`.
This file is part of the repository, not of the installed package.
"""

from __future__ import annotations

import argparse
import json
import sys

from polyloop.testing import FakeAnthropicServer, FakeOpenAIServer, FakeResponse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python tools/fake_model_server.py",
        description="Serve a scripted fake model API (OpenAI-compatible or Anthropic) on 127.0.0.1.",
    )
    parser.add_argument("--api", choices=("openai", "anthropic"), default="openai")
    parser.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    parser.add_argument("--script", help="a JSONL file of answers ({'tool','args'} / {'calls'} / {'final'} / {'error'})")
    parser.add_argument("--final", default=None, help="answer every request left with this final text")
    parser.add_argument("--model", default="fake-model")
    parser.add_argument("--lifetime", type=float, default=300.0, help="stop after this many seconds")
    args = parser.parse_args(argv)
    script: list[FakeResponse] = []
    if args.script:
        with open(args.script, encoding="utf-8") as fh:
            script = [FakeResponse.from_json(json.loads(line)) for line in fh if line.strip()]
    responder = None if args.final is None else (lambda body: FakeResponse.final(args.final))
    kind, variable = (
        (FakeOpenAIServer, "OPENAI_BASE_URL") if args.api == "openai" else (FakeAnthropicServer, "ANTHROPIC_BASE_URL")
    )
    with kind(script, responder=responder, model=args.model, lifetime=args.lifetime, port=args.port) as server:
        print(f"{variable}={server.base_url}", flush=True)
        print(f"POLYLOOP_MODEL={server.model}", flush=True)
        print(f"serving for {args.lifetime:g}s; Ctrl-C stops", file=sys.stderr, flush=True)
        server.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
