"""A child process running one user's loop (`loops.py`) on a JSONL store that SIGKILLs itself on cue.

    python loop_child.py hand|pyd|openai RUN_ID DIR      (POLYLOOP_KILL_AT=before|after:KIND:N, DURABLE_WORLD=...)
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for `support`

import loops  # noqa: E402
from support.cue import KillCueStore  # noqa: E402


def main() -> int:
    which, run_id, directory = sys.argv[1:4]
    store = KillCueStore(directory, os.environ.get("POLYLOOP_KILL_AT", ""))
    entry = {"hand": loops.hand_main, "pyd": loops.pyd_main, "openai": loops.openai_main}[which]
    result = asyncio.run(entry(run_id, store))
    print(result.reason, result.text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
