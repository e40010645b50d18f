"""Run the MCP test agent once in this process on a kill-cue store: `python child.py DIR RUN_ID KILL_AT`.

`KILL_AT` is a `tests/support/cue.py` point (`before:step_completed:2`: the
tool answered, its result is not recorded) or `none`. Exit codes as the CLI's:
0 finished, 3 needs an operator, 1 anything else (printed).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/, for `support`
sys.path.insert(0, str(HERE))

from polyloop import NeedsOperatorError  # noqa: E402
from mcp_agent import agent  # noqa: E402
from support.cue import KillCueStore  # noqa: E402


def main() -> int:
    directory, run_id, kill_at = sys.argv[1:4]
    store = KillCueStore(directory, kill_at)
    try:
        result = asyncio.run(agent().run("mcp", run_id=run_id, store=store, target=f"{HERE / 'mcp_agent.py'}:agent"))
    except NeedsOperatorError as exc:
        print(exc, file=sys.stderr)
        return 3
    print(result.reason)
    return 0


if __name__ == "__main__":
    sys.exit(main())
