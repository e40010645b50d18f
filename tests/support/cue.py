"""The kill-cue store: the real JSONL store, which SIGKILLs its own process before or after one chosen write.

`KillCueStore(directory, kill_at)` counts its writes by kind; `kill_at` is
`before:KIND:N` or `after:KIND:N`, KIND one of `run_started`, `intent:model_call`,
`intent:action`, `intents`, `action_result`, `model_call_result`, `step_completed`,
`run_finished`, `resolution`, `approval_request`, `decision`. "After" means the
store's write returned. A subclass may hook `fault(point)` / `clear()` to fail the
cued write instead (crash_child.py makes the disk fail it).
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from typing import Any

from polyloop import JsonlStore


def die() -> None:
    """A real SIGKILL of this real process."""
    os.kill(os.getpid(), signal.SIGKILL)


class KillCueStore(JsonlStore):
    def __init__(self, directory: str, kill_at: str, **kw: Any) -> None:
        super().__init__(directory, **kw)
        self.kill_at = kill_at
        self.counts: Counter[str] = Counter()

    def fault(self, point: str) -> None:
        """Called before the write at `point` (`KIND:N`) runs; a subclass may arm a fault."""

    def clear(self) -> None:
        """Called after the write at a point, whether it failed or not."""

    async def _cue(self, kind: str, write: Any) -> None:
        self.counts[kind] += 1
        point = f"{kind}:{self.counts[kind]}"
        if self.kill_at == f"before:{point}":
            write.close()
            die()
        self.fault(point)
        try:
            await write
        finally:
            self.clear()
        if self.kill_at == f"after:{point}":
            die()

    async def write_run_started(self, record):
        await self._cue("run_started", super().write_run_started(record))

    async def write_intent(self, run_id, record):
        await self._cue(f"intent:{record.kind}", super().write_intent(run_id, record))

    async def write_intents(self, run_id, records):
        await self._cue("intents", super().write_intents(run_id, records))

    async def write_action_result(self, run_id, record):
        await self._cue("action_result", super().write_action_result(run_id, record))

    async def write_model_call_result(self, run_id, record):
        await self._cue("model_call_result", super().write_model_call_result(run_id, record))

    async def write_step_completed(self, run_id, record):
        await self._cue("step_completed", super().write_step_completed(run_id, record))

    async def write_run_finished(self, run_id, record):
        await self._cue("run_finished", super().write_run_finished(run_id, record))

    async def write_resolution(self, run_id, record):
        await self._cue("resolution", super().write_resolution(run_id, record))

    async def write_approval_request(self, run_id, record):
        await self._cue("approval_request", super().write_approval_request(run_id, record))

    async def write_decision(self, run_id, record):
        await self._cue("decision", super().write_decision(run_id, record))
