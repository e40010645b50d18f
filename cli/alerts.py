"""The alert line: every failed verification (or rollback) a command's run raised, on stderr.

The durable record is the alert (docs/explanation/human-oversight.md); this
line makes sure a person at the terminal sees it too, even when the run went
on after a successful rollback. It is read back from the log after the run,
so it covers `run` and `resume` alike; it never fails the command.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os

import orjson

from polyloop import (
    ActionResult,
    GuardCheck,
    Intent,
    JsonlStore,
    Record,
    RunStarted,
    StepCompleted,
    decode_record,
)
from polyloop._files import open_regular  # the library's one refusal of a FIFO, device or socket; not public API
from polyloop.stores import open_store, store_kind

from . import waits_view


def now() -> str:
    """The log's timestamp format, to compare with the records' `at`."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def warn_since(where: str, run_id: str | None, since: str) -> None:
    """Print one alert line per failed rollback recorded since `since`, and per failed
    verification recorded since then or still unsettled when the command began."""
    if run_id is None or not _guarded(where, run_id):
        return
    try:
        records = asyncio.run(_read(where, run_id))
    except Exception:  # a warning must not turn into a second failure: the record stays
        return
    tools: dict[str, str] = {}
    steps_done: dict[int, str] = {}
    checks: list[GuardCheck] = []
    found: list[tuple[str, str, str]] = []
    for r in records:
        if isinstance(r, Intent) and r.tool is not None:
            tools[r.result_id] = r.tool
        elif isinstance(r, StepCompleted):
            steps_done[r.step] = r.at
        elif isinstance(r, GuardCheck) and r.guard == "verify" and not r.passed:
            checks.append(r)
        elif isinstance(r, ActionResult) and r.is_error and r.at >= since and "-r" in r.result_id:
            found.append((r.result_id, tools.get(r.result_id, "?"), f"rollback failed: {r.observation}"))
    for c in checks:
        # Raised by this command, or raised before (a crash may have kept it from being
        # printed) and still unsettled when this command began: at least once.
        step = int(c.result_id[1:].split("-")[0])
        if c.at < since and steps_done.get(step, since) < since:
            continue
        then = f"; rollback: {c.rollback}" if c.rollback else "; no rollback: the run stops"
        found.insert(0, (c.result_id, tools.get(c.result_id, "?"),
                         f"verification failed: {c.reason or 'it returned False'}{then}"))
    waits_view.alerts(found)


def _guarded(where: str, run_id: str) -> bool:
    """Whether the run declares any guard (only then can it have alerts).

    For a JSONL log only its first line is read: the whole log is read
    again only for runs that can have alerts. Other stores say yes.
    """
    if store_kind(where) == "postgresql":
        return True
    try:
        started = decode_record(orjson.loads(_first_line(str(JsonlStore(where).path(run_id)))))
    except Exception:  # no regular log, or no valid first record: nothing to warn about
        return False
    tools = started.config.get("tools") if isinstance(started, RunStarted) else None
    return isinstance(tools, list) and any(isinstance(t, dict) and t.get("guards") for t in tools)


def _first_line(path: str, limit: int = 1 << 20) -> bytes:
    """The first line of a regular file; never follows a link, never blocks on a FIFO."""
    fd = open_regular(path, follow_symlinks=False)
    try:
        return os.pread(fd, limit, 0).split(b"\n", 1)[0]
    finally:
        os.close(fd)


async def _read(where: str, run_id: str) -> list[Record]:
    async with open_store(where) as store:
        return list(await store.read_log(run_id))
