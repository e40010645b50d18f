"""A child process that runs an agent on a JSONL store which kills or fails itself on cue.

    python crash_child.py run TARGET RUN_ID GOAL DIR
    python crash_child.py resolve RUN_ID RESULT_ID executed|not_executed OBSERVATION DIR
    python crash_child.py start-only RUN_ID DIR     (write_run_started, no lock: a raw race)

`POLYLOOP_KILL_AT=before|after:KIND:N` SIGKILLs the process just before or
just after the N-th write of KIND by this process, where KIND is one of
`run_started`, `intent:model_call`, `intent:action`, `model_call_result`,
`step_completed`, `run_finished`, `resolution`, `intents` (the intents of a
step's several tool calls, written together), `action_result`. The kill is a real SIGKILL
of this real process; "after" means the store's write returned (for writes
handed to the writer thread, the record is then on disk).

`POLYLOOP_KILL_AT=create:STAGE` kills inside the creation of the log:
`partial-write` (half the first record is in the private temp file),
`before-fsync`, `before-link` (the temp file is complete and synced),
`before-dir-fsync` (the log is published, the directory not yet synced).

`POLYLOOP_FAULT=enospc|eio-fsync:KIND:N` makes the N-th write of KIND fail
like a full disk (half the bytes land, then ENOSPC) or a failing fsync (EIO).

Exit codes follow the CLI: 0 finished, 1 store/corrupt failure, 2 bad
input, 3 needs an operator.
"""

from __future__ import annotations

import asyncio
import errno
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for `support`

from polyloop import (
    CorruptLogError,
    NeedsOperatorError,
    PolyLoopError,
    RunStarted,
    StoreError,
    mark_resolved,
    run_target,
)
from polyloop.stores._disk import Disk
from support.cue import KillCueStore, die

KILL_AT = os.environ.get("POLYLOOP_KILL_AT", "")
FAULT = os.environ.get("POLYLOOP_FAULT", "")


def _fd_path(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


class CueDisk(Disk):
    """The real disk, which kills the process inside the log's creation or fails one write on cue."""

    def __init__(self) -> None:
        self.fault = ""  # "enospc" or "eio-fsync" while the cued write runs

    # -- kills inside the creation of the log --------------------------------

    def write(self, fd: int, data: bytes) -> None:
        if self.fault == "enospc":
            super().write(fd, data[: len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if KILL_AT.startswith("create:") and _fd_path(fd).endswith(".tmp"):
            if KILL_AT == "create:partial-write":
                super().write(fd, data[: len(data) // 2])
                die()
            super().write(fd, data)
            if KILL_AT == "create:before-fsync":
                die()
            return
        super().write(fd, data)

    def fsync(self, fd: int) -> None:
        if self.fault == "eio-fsync":
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        super().fsync(fd)
        if KILL_AT == "create:before-link" and _fd_path(fd).endswith(".tmp"):
            die()

    def fsync_dir(self, path: str) -> None:
        if KILL_AT == "create:before-dir-fsync":
            die()
        if self.fault == "eio-fsync":
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        super().fsync_dir(path)


class CueStore(KillCueStore):
    """The kill-cue store on the cue disk: a kill at one chosen write, or a fault in it."""

    def __init__(self, directory: str) -> None:
        self.disk = CueDisk()
        super().__init__(directory, KILL_AT, _disk=self.disk)

    def fault(self, point: str) -> None:
        fault, _, where = FAULT.partition(":")
        if where == point:
            if fault not in ("enospc", "eio-fsync"):
                raise ValueError(f"unknown fault {FAULT!r}")
            self.disk.fault = fault

    def clear(self) -> None:
        self.disk.fault = ""


def exit_code(exc: PolyLoopError) -> int:
    if isinstance(exc, NeedsOperatorError):
        return 3
    if isinstance(exc, (StoreError, CorruptLogError)):
        return 1
    return 2


async def main(argv: list[str]) -> int:
    command = argv[0]
    if command == "run":
        target, run_id, goal, directory = argv[1:]
        result = await run_target(target, goal=goal, store=CueStore(directory), run_id=run_id)
        print(result.text)
        return 0 if result.reason != "error" else 1
    if command == "resolve":
        run_id, result_id, outcome, observation, directory = argv[1:]
        executed = outcome == "executed"
        await mark_resolved(
            CueStore(directory),
            run_id,
            result_id,
            executed=executed,
            observation=observation if executed else None,
            reason="crash test ground truth",
            by="crash-test",
        )
        return 0
    if command == "start-only":
        run_id, directory = argv[1:]
        barrier = os.environ.get("POLYLOOP_BARRIER")
        if barrier:
            open(f"{barrier}.{os.getpid()}.ready", "w").close()
            while not os.path.exists(barrier):
                await asyncio.sleep(0.0005)
        await CueStore(directory).write_run_started(RunStarted(run_id=run_id, goal=f"pid {os.getpid()}"))
        return 0
    raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    try:
        code = asyncio.run(main(sys.argv[1:]))
    except PolyLoopError as exc:
        print(f"polyloop: {exc}", file=sys.stderr)
        code = exit_code(exc)
    sys.exit(code)
