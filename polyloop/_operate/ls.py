"""Listing the runs of a directory or a database with their status (what `polyloop ls` runs).

Each run is judged by `inspect_run` itself, so `ls` and `inspect` cannot
disagree; what `ls` adds is finding the logs, reading them without ever
blocking on something that is not a file, and spreading the work over the
machine's cores the way `verify_logs` does. On a PostgreSQL store the runs
come from one query and their logs in chunks of `_CHUNK` runs per query, on
one pooled connection (docs/reference/stores.md).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, get_args

from ..stores._artifacts import read_artifact_file
from .._log.codec import ParsedLog, parse_log
from .._log.errors import InvalidInputError, InvalidRunIdError, RunNotFoundError, StoreError
from .._files import NotRegularFileError, read_regular
from .._log.ids import check_run_id
from .inspect import RunStatus, inspect_run
from .selection import Choice, batch_run_ids, cause_of
from .._log.records import Artifact
from .._log.store_port import Capabilities, Store, capabilities_of
from ..stores._disk import Disk
from .verify import _ignore_sigint
from ..stores._jsonl import JsonlStore
from ..stores._open import open_store
from ..stores._url import store_kind

STATUSES: tuple[str, ...] = get_args(RunStatus)
_SUFFIX = ".jsonl"
_IN_PROCESS_BELOW = 64  # fewer logs than this are not worth starting processes for
_CHUNK = 128  # runs whose logs a PostgreSQL store reads in one query
_DISK = Disk()  # stateless: reads only regular files, never follows a link or waits on a FIFO


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One line of `polyloop ls`: a run's status, what waits, and when it last moved.

    Attributes:
        run_id: the run (the file name without `.jsonl`; for a file whose name
            is not a safe run id, that name with undecodable bytes escaped).
        status: as `inspect_run` says: `finished`, `needs_operator`,
            `resumable`, `corrupt` or `active`. An entry that cannot be a
            run's log (an unsafe file name, a FIFO or directory named
            `*.jsonl`, a file that cannot be read) is `corrupt`, with a
            reason that starts `not a run log:`.
        waiting: the `kind` of each entry of `RunReport.waiting`, in order
            (one per entry, so its length is how many things wait).
        waits: the entries of `RunReport.waiting` themselves, `{"id", "kind",
            "tool", "args", "reason"}` (`ls --json` prints them as `waiting`,
            and the kinds as `waiting_kinds`).
        steps: completed steps (0 when corrupt).
        updated: the `at` of the log's last record, as written (ISO 8601
            UTC), or None when there is none or it is not an ISO time.
        reason: `RunReport.reason`: why it finished or stopped.
        file: the entry's name in the directory; on a PostgreSQL store,
            `postgresql://USER@HOST:PORT/DB/RUN_ID` (never a password), as
            `verify --store` names a run.
        target: the agent target `run_started` records (None when corrupt or not recorded).
        cause: for a finished run, what ended it beyond `reason`'s word:
            the error of a run that ended in one, with the model's last
            error in the provider's words; who cancelled it and why
            (`cancelled by alice: superseded`). None for a final answer, a
            spent step budget, and a run that did not finish (its `reason`
            is already the sentence that says why it stopped).

    Not guaranteed: the summary is a snapshot; a live run may have moved on
    by the time it is read.
    """

    run_id: str
    status: RunStatus
    waiting: tuple[str, ...]
    steps: int
    updated: str | None
    reason: str
    file: str
    target: str | None = None
    cause: str | None = None
    waits: tuple[dict[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        """One object of the `ls --json` array (docs/reference/json.md)."""
        return {
            "run_id": self.run_id,
            "status": self.status,
            # One shape wherever `waiting` appears (inspect, run, batch, ...); the list of kinds
            # it was before schema 1 stays as `waiting_kinds` for the scripts that read it.
            "waiting": [dict(w) for w in self.waits],
            "waiting_kinds": list(self.waiting),
            "steps": self.steps,
            "updated": self.updated,
            "reason": self.reason,
            "file": self.file,
            "target": self.target,
            "cause": self.cause,
        }


class _NotALog(Exception):
    """The entry named `*.jsonl` is not something a run's log can be."""


class _Snapshot:
    """A `JsonlStore` seen by `inspect_run` through a read that cannot hang.

    The log is read with `read_regular` (never waiting on a FIFO, refused
    unless it is a regular file), following a symbolic link as the listing
    does, where `JsonlStore` refuses one. Only the reads `inspect_run` makes
    are offered (the holder probe, the log, then its products, read as
    `JsonlStore.get_product` reads them so `ls` judges them as `inspect`
    does), in the order it makes them; writing a product is refused.
    """

    def __init__(self, store: JsonlStore) -> None:
        self._store = store

    def holder(self, run_id: str) -> str | None:
        return self._store.holder(run_id)

    async def read_parsed(self, run_id: str) -> ParsedLog:
        return parse_log(_read_regular(self._store.path(run_id), run_id))

    async def get_product(self, run_id: str, name: str) -> bytes | None:
        try:
            return read_artifact_file(str(self._store.artifact_folder(run_id)), name, _DISK.read, run_id=run_id)
        except OSError:
            return None  # unreadable: missing, as `verify` counts it (a listing does not stop for one run)

    async def put_product(self, run_id: str, name: str, data: bytes) -> None:
        raise StoreError("ls writes nothing", run_id=run_id)

    async def write_artifact(self, run_id: str, record: Artifact) -> None:
        raise StoreError("ls writes nothing", run_id=run_id)


def _read_regular(path: Path, run_id: str) -> bytes:
    try:
        return read_regular(path)
    except FileNotFoundError:
        raise RunNotFoundError(run_id, str(path.parent)) from None
    except NotRegularFileError as exc:
        raise _NotALog(exc.strerror) from exc
    except OSError as exc:
        raise _NotALog(f"cannot read it: {exc.strerror}") from exc


def _shown_name(name: str) -> str:
    # File names that are not UTF-8 arrive with surrogate escapes, which no
    # JSON encoder accepts: show their bytes as `\xNN` instead.
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _not_a_log(name: str, why: str) -> RunSummary:
    return RunSummary(
        run_id=_shown_name(name[: -len(_SUFFIX)]),
        status="corrupt",
        waiting=(),
        steps=0,
        updated=None,
        reason=f"not a run log: {why}",
        file=_shown_name(name),
    )


def _moment(at: object) -> datetime | None:
    """`at` as an aware UTC time, or None when it is not an ISO time (logs are untrusted)."""
    if not isinstance(at, str):
        return None
    try:
        moment = datetime.fromisoformat(at)
        if moment.tzinfo is None:
            return moment.replace(tzinfo=timezone.utc)  # our writers always write UTC
        return moment.astimezone(timezone.utc)
    except (ValueError, OverflowError):  # e.g. year 1 at +01:00 has no UTC time
        return None


async def _summarize(store: JsonlStore, name: str) -> RunSummary | None:
    """The summary of the entry `name` of the store's directory (None if it is gone)."""
    run_id = name[: -len(_SUFFIX)]
    try:
        check_run_id(run_id)
    except InvalidRunIdError:
        return _not_a_log(name, "the file name is not a safe run id (letters, digits, '.', '_', '-')")
    try:
        report = await inspect_run(_Snapshot(store), run_id)  # type: ignore[arg-type]
    except RunNotFoundError:
        return None  # removed since the directory was listed
    except _NotALog as exc:
        return _not_a_log(name, str(exc))
    return _summary(run_id, report, name)


def _summary(run_id: str, report: Any, file: str) -> RunSummary:
    last = report.records[-1] if report.records else None
    waits = report.waiting
    return RunSummary(
        run_id=run_id,
        status=report.status,
        waiting=tuple(str(w["kind"]) for w in waits),
        waits=tuple(waits),
        steps=report.recovery.completed_steps if report.recovery is not None else 0,
        updated=last.at if last is not None and _moment(last.at) is not None else None,
        reason=report.reason,
        file=file,
        target=report.recovery.started.target if report.recovery is not None else None,
        cause=cause_of(report),
    )


class _Read:
    """One run of a store as `inspect_run` sees it: the holder and the log read beforehand, and
    the products read from the store itself (so they are judged as `inspect` judges them)."""

    def __init__(self, holder: str | None, parsed: ParsedLog, store: Store) -> None:
        self._holder = holder
        self._parsed = parsed
        self._store = store
        has = capabilities_of(store)
        self.capabilities = Capabilities(holding=True, parsing=True, artifacts=has.artifacts, exporting=has.exporting)

    def holder(self, run_id: str) -> str | None:
        return self._holder

    async def read_parsed(self, run_id: str) -> ParsedLog:
        return self._parsed

    async def get_product(self, run_id: str, name: str) -> bytes | None:
        data: bytes | None = await self._store.get_product(run_id, name)  # type: ignore[attr-defined]
        return data

    def product_chunks(self, run_id: str, name: str) -> AsyncIterator[bytes]:
        return self._store.product_chunks(run_id, name)  # type: ignore[attr-defined, no-any-return]


async def _store_summaries(
    store: Store, progress: Callable[[int, int], None] | None, batch: str | None = None
) -> list[RunSummary]:
    """Every run of a store with `list_runs`, judged by `inspect_run`, as a `RunSummary`.

    A store that reads many logs at once (`live_holders` and
    `read_parsed_many`, as `PostgresStore`) is asked for `_CHUNK` runs a
    query; any other is asked run by run through `inspect_run`. As on a
    directory, the holder is probed before the log is read.
    """
    run_ids: list[str] = await store.list_runs()  # type: ignore[attr-defined]
    if batch is not None:
        if not capabilities_of(store).batches:
            raise InvalidInputError(f"{store!r} keeps no batches")
        named = await store.batch_runs(batch)  # type: ignore[attr-defined]
        run_ids = [r for r in run_ids if r in named]
    batched = capabilities_of(store).reads_many
    prefix = f"postgresql://{store.where}/" if batched else ""  # type: ignore[attr-defined]
    found: list[RunSummary] = []
    total = len(run_ids)
    for start in range(0, total, _CHUNK):
        chunk = run_ids[start : start + _CHUNK]
        if batched:
            holders = await store.live_holders()  # type: ignore[attr-defined]
            logs = await store.read_parsed_many(chunk)  # type: ignore[attr-defined]
        for run_id in chunk:
            try:
                if batched:
                    if run_id not in logs:
                        continue  # removed since the runs were listed
                    report = await inspect_run(_Read(holders.get(run_id), logs[run_id], store), run_id)  # type: ignore[arg-type]
                else:
                    report = await inspect_run(store, run_id)
            except RunNotFoundError:
                continue
            found.append(_summary(run_id, report, prefix + run_id))
        if progress:
            progress(min(start + _CHUNK, total), total)
    return found


async def _summaries_at(url: str, progress: Callable[[int, int], None] | None, batch: str | None) -> list[RunSummary]:
    async with open_store(url) as store:  # type: ignore[attr-defined]
        return await _store_summaries(store, progress, batch)


def _summarize_many(directory: str, names: list[str]) -> list[RunSummary]:
    return asyncio.run(_summaries(directory, names, None, 0, len(names)))


async def _summaries(
    directory: str,
    names: list[str],
    progress: Callable[[int, int], None] | None,
    done: int,
    total: int,
) -> list[RunSummary]:
    store = JsonlStore(directory)
    found = []
    for name in names:
        summary = await _summarize(store, name)
        if summary is not None:
            found.append(summary)
        done += 1
        if progress and (done % 64 == 0 or done == total):
            progress(done, total)
    return found


def _find_run_logs(directory: str | os.PathLike[str]) -> list[str]:
    # Not recursive, unlike verify: a run's log is `<directory>/<run_id>.jsonl`.
    # Entries that are not regular files are kept: they are reported.
    with os.scandir(directory) as entries:
        return sorted(e.name for e in entries if e.name.endswith(_SUFFIX))


def _sort_key(s: RunSummary) -> tuple[int, float, str]:
    moment = _moment(s.updated)
    if moment is None:
        return (1, 0.0, s.file)
    return (0, -moment.timestamp(), s.file)


def list_runs(
    directory: str | os.PathLike[str],
    *,
    statuses: Iterable[str] | None = None,
    workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    since: timedelta | str | None = None,
    limit: int | None = None,
    batch: str | None = None,
    target: str | None = None,
) -> list[RunSummary]:
    """Summarize every run of `directory` (or of a database), most recent activity first.

    Each `<run_id>.jsonl` directly in `directory` is judged by `inspect_run`
    (so the status is the one `polyloop inspect` gives) and summarized as a
    `RunSummary`. Read-only, like `inspect_run`: the run's lock is never
    taken (only probed for a live holder, as `inspect` does), no torn tail
    is sealed, nothing is written. An entry that cannot be a run's log is
    listed as `corrupt` with a reason, never raised. Runs without a time
    come last; ties are broken by file name.

    `directory` may instead be a `postgresql://` URL (as `open_store` takes
    it): every run of the database with a log is judged the same way, its
    `file` being `postgresql://USER@HOST:PORT/DB/RUN_ID`. The runs are
    listed in one query and their logs read 128 runs a query on one pooled
    connection; `workers` does not apply. A run submitted to the queue but
    not yet started has no log and is not listed.

    Blocking: from async code, call it with `await asyncio.to_thread(...)`.

    Args:
        directory: the run directory (as `JsonlStore(directory)`), or a
            `postgresql://` URL.
        statuses: keep only runs with one of these statuses (None: all).
        workers: processes to use (default: one per core; 1 means in-process;
            fewer than 64 logs are always done in-process).
        progress: called with `(logs_done, logs_total)` as work completes.
        since: keep only runs whose last record is no older than this (a
            `timedelta`, or text such as `90s`, `15m`, `2h`, `7d`, `1h30m`).
        limit: keep only the first `limit` runs (the most recent).
        batch: keep only the runs of this batch (the ones its manifest
            names; on PostgreSQL its row of `polyloop_batches`); only their
            logs are read.
        target: keep only runs of this agent target: the recorded one, a
            path suffix of it (`examples/demo.py:agent`), or a shell
            pattern (`*demo.py:*`).

    Returns:
        The summaries, sorted by last activity, most recent first.

    Raises:
        ValueError: a status in `statuses` is not one of `finished`,
            `needs_operator`, `resumable`, `corrupt`, `active`; a negative `limit`.
        InvalidInputError: there is no batch `batch`, or `since` is text that is not a duration.
        RuntimeError: called from a running event loop (it would block it).
        FileNotFoundError, NotADirectoryError, PermissionError: the
            directory cannot be listed.
        StoreError: the database cannot be reached, or failed (or psycopg
            is not installed).
        StoreUrlError: `directory` is a URL of a scheme PolyLoop does not
            serve (`mysql://...`).
    """
    _refuse_inside_a_loop()
    chosen = Choice.make(statuses, STATUSES, since=since, limit=limit, target=target)
    where = os.fspath(directory)
    if store_kind(where) == "postgresql":
        return chosen.of(asyncio.run(_summaries_at(where, progress, batch)), _sort_key)
    names = _find_run_logs(directory)
    if batch is not None:
        named = batch_run_ids(where, batch)
        names = [n for n in names if n[: -len(_SUFFIX)] in named]
    workers = workers or os.cpu_count() or 1
    if workers <= 1 or len(names) < _IN_PROCESS_BELOW:
        found = asyncio.run(_summaries(where, names, progress, 0, len(names)))
    else:
        found = _in_pool(where, names, workers, progress)
    return chosen.of(found, _sort_key)


def _refuse_inside_a_loop() -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError(
        "list_runs blocks: from async code, call it with `await asyncio.to_thread(list_runs, ...)`"
    )


def _in_pool(
    directory: str, names: list[str], workers: int, progress: Callable[[int, int], None] | None
) -> list[RunSummary]:
    total = len(names)
    size = max(16, min(256, total // (workers * 8) or 1))
    chunks = [names[i : i + size] for i in range(0, total, size)]
    found: list[RunSummary] = []
    done = 0
    pool = ProcessPoolExecutor(max_workers=workers, initializer=_ignore_sigint)
    try:
        for chunk, batch in zip(chunks, pool.map(_summarize_many, [directory] * len(chunks), chunks)):
            found.extend(batch)
            done += len(chunk)
            if progress:
                progress(done, total)
    except BaseException:
        # As in verify_logs: the workers ignore Ctrl-C; this process drops
        # the work not yet started and re-raises.
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return found
