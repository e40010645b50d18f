"""The PolyLoop demo as a script: run the demo agent once and say what to try next.

The agent itself ships in the package, as `polyloop.examples.demo:agent` (see
that module for its tools and its crash switch), so it also runs outside this
repository: `polyloop demo`. This file keeps the repository's commands working:

    python examples/demo.py                        # one run, start to finish
    polyloop run examples/demo.py:agent --run-id notes-1 --goal "write up the notes"

With `POLYLOOP_DEMO_CRASH=1` (or `=write_file`, or `=run_shell`) that tool
kills its own process with SIGKILL right after its side effect and before
PolyLoop can record the result. See examples/README.md for the walkthrough:
run, crash, `inspect`, `mark-resolved`, `resume`, `verify`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from polyloop import JsonlStore, PolyLoopError, default_directory, new_run_id
from polyloop.examples.demo import (  # noqa: F401  (the names the other examples and the tests use)
    CRASH_ENV,
    GOAL,
    NOTES,
    SCRIPT,
    SYSTEM,
    TOOLS,
    agent,
    list_files,
    read_file,
    run_shell,
    workspace,
    write_file,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the PolyLoop demo agent once.")
    parser.add_argument("--run-id", default=None, help="default: a fresh, sortable id")
    parser.add_argument("--goal", default="write up the meeting notes and collect the TODOs")
    parser.add_argument("--dir", default=None, help="where run logs go (default: $POLYLOOP_DIR or ./runs)")
    args = parser.parse_args(argv)
    run_id = args.run_id or new_run_id()
    store = JsonlStore(args.dir or default_directory())
    print(f"PolyLoop demo: run {run_id}", file=sys.stderr, flush=True)
    try:
        result = asyncio.run(
            agent.run(
                args.goal,
                run_id=run_id,
                store=store,
                target=f"{Path(__file__).resolve()}:agent",
                new=True,
            )
        )
    except PolyLoopError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"finished ({result.reason}) after {result.steps} steps: {result.text}")
    print(f"  log:       {store.path(run_id)}   (one JSON record per line)")
    print(f"  workspace: {workspace(run_id)}")
    where = f" --dir {args.dir}" if args.dir else ""
    print(f"  look:      polyloop inspect {run_id}{where}")
    print(
        "Now crash it on purpose and recover (walkthrough in examples/README.md):\n"
        f'  {CRASH_ENV}=1 polyloop run examples/demo.py:agent --run-id demo --goal "write up the notes"'
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
