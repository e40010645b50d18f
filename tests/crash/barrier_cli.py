"""`python barrier_cli.py ARGS...`: wait at `$POLYLOOP_CLI_BARRIER`, then run `polyloop ARGS...`.

Lines contenders up before the command line starts, so they race for the
run's hold itself (the hold is taken before the agent target is imported).
"""

import os
import sys
import time
from pathlib import Path

barrier = os.environ["POLYLOOP_CLI_BARRIER"]
Path(f"{barrier}.{os.getpid()}.ready").touch()
while not os.path.exists(barrier):
    time.sleep(0.001)

from polyloop_cli.entry import main  # noqa: E402  (after the barrier, on purpose)

sys.argv[0] = "polyloop"
main()
