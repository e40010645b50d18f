"""The JSON documents commands print with --json: one place adds `schema` and writes them.

Every document carries `"schema"` (docs/reference/json.md): the version of
the documents' shapes, raised when a field changes shape. `ls --json` is an
array, so each of its objects carries it.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Iterator
from typing import Any

from polyloop import RunReport, inspect_run
from polyloop.for_cli import JSON_SCHEMA
from polyloop.stores import open_store

from .terminal import print_json

SCHEMA = JSON_SCHEMA  # one version for the library's documents and the command line's


def emit(doc: dict[str, Any], *, lines: bool = False) -> None:
    """Write `doc`, with `schema` first, as the one document on stdout (or one line of a stream)."""
    print_json({"schema": SCHEMA, **doc}, lines=lines)


def emit_each(entries: list[dict[str, Any]]) -> None:
    """Write an array of objects (`ls --json`), each carrying `schema`."""
    print_json([{"schema": SCHEMA, **e} for e in entries])


def error_doc(kind: str, code: int, message: str) -> dict[str, Any]:
    """The --json form of a failure (the message is exact: JSON escaping makes it safe)."""
    return {"error": {"type": kind, "message": message, "exit_code": code}}


@contextlib.contextmanager
def quiet(json: bool) -> Iterator[None]:
    """With --json, what would go to stdout (human lines, the agent's prints) goes to stderr."""
    with contextlib.redirect_stdout(sys.stderr) if json else contextlib.nullcontext():
        yield


def run_doc(command: str, report: RunReport, *, code: int, error: dict[str, Any] | None = None,
            **extra: Any) -> dict[str, Any]:
    """The document of a command that acted on a run: the run as `inspect --json` shows it after,
    plus `command`, `exit_code` and `error` (null, or the error document's `error`)."""
    return {"command": command, **report.to_json(), **extra, "exit_code": code, "error": error}


def report_of(where: str, run_id: str, *, validity: bool = False) -> RunReport | None:
    """The run's report read anew (after a command failed on it); None when it cannot be read."""

    async def read() -> RunReport:
        async with open_store(where) as store:
            return await inspect_run(store, run_id, validity=validity)

    try:
        return asyncio.run(read())
    except Exception:  # no log (never started), an unreachable store: the error document says why
        return None


def on_failure(scope: Any, command: str, where: str, run_id: str) -> None:
    """With --json, a failure of `command` on `run_id` prints the run as it stands, with the error
    (a bad request, exit 2, prints the error alone: the run is not what it is about)."""

    def document(error: dict[str, Any]) -> dict[str, Any] | None:
        code = error["exit_code"]
        if code == 2:
            return None
        report = report_of(where, run_id, validity=code == 4)
        return None if report is None else run_doc(command, report, code=code, error=error)

    scope.document = document


def ran(json: bool, command: str, where: str, result: Any, code: int) -> None:
    """With --json, the document of a `run` or `resume` that ended (finished, or stopped by itself)."""
    if not json:
        return
    report = report_of(where, result.run_id)
    if report is None:  # the store went away between the run's end and this read: say what is known
        emit(error_doc("StoreError", 1, f"run {result.run_id} ended ({result.reason}) but cannot be read back"))
        return
    emit(run_doc(command, report, code=code, already_finished=bool(getattr(result, "already_finished", False))))


def settled(command: str, report: RunReport, *, id: str, decision: str, by: str, reason: str | None) -> None:
    """The document of a settlement (mark-resolved, approve, deny, answer): what was recorded, and the run after."""
    emit(run_doc(command, report, code=0, settled={"id": id, "decision": decision, "by": by, "reason": reason}))
