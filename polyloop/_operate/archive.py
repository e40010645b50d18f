"""`archive`: move runs out of the way, whole, verified first, never a live one.

From a run directory, each run is moved with its products, its lock file
and any request to stop (polyloop/_operate/archive_move.py: a crash leaves
it whole in exactly one of the two directories). From a PostgreSQL store,
each run is exported to `DIR/<run_id>.jsonl` (the bytes the JSONL store
would have written) and deleted from the database in one transaction per
run. Either way the archive is an ordinary run directory: `polyloop verify`,
`ls`, `inspect` (and `resume`, for a run archived unfinished) work on it.

Which runs: the ones named, whatever their status (a person chose them:
an unfinished one stays resumable from the archive); or, with `finished`,
every finished run (older than `older_than`, by its last record). Never a
run a live process holds (it is refused, and stays where it is), never a
corrupt log (refused: `polyloop verify` says what is wrong with it).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone

from .._files import open_regular
from .._log.codec import parse_log
from .._log.errors import InvalidInputError, RunActiveError, RunNotFoundError
from .._log.ids import check_run_id
from .._log.store_port import capabilities_of
from ..stores._jsonl import JsonlStore
from ..stores._open import open_store
from ..stores._url import store_kind
from .archive_db import archive_runs
from .archive_move import MoveDisk, move, same_file_system, sweep
from .archive_report import ArchivedRun, ArchiveReport
from .ls import list_runs
from .selection import moment, parse_duration, within
from .verify import located_problems, verify_file

async def archive(
    source: str | os.PathLike[str],
    *,
    to: str | os.PathLike[str],
    run_ids: Sequence[str] | None = None,
    finished: bool = False,
    older_than: timedelta | str | None = None,
) -> ArchiveReport:
    """Move runs from a run directory (or a PostgreSQL store) into the run directory `to`.

    Args:
        source: the run directory, or a `postgresql://` URL.
        to: the archive: a directory (created if missing), on the same file
            system as a source directory.
        run_ids: the runs to archive (any status but held); or None with `finished`.
        finished: archive every finished run instead.
        older_than: with `finished`, only runs whose last record is older
            than this (a `timedelta`, or text such as `7d`, `12h`, `1h30m`).

    Returns:
        An `ArchiveReport`; a run held by a live process, with a corrupt log,
        or already in the archive is `refused` and stays where it was.

    Raises:
        InvalidInputError: neither or both of `run_ids` and `finished`;
            `older_than` without `finished` or not a duration; `to` is the
            source itself or on another file system.
        RunNotFoundError: a named run has no log.
        InvalidRunIdError, StoreError, OSError: the directories cannot be used.
    """
    if (run_ids is None) == (not finished) or (run_ids is not None and finished):
        raise InvalidInputError("name the runs to archive, or archive the finished ones (--finished): one of them")
    if older_than is not None and not finished:
        raise InvalidInputError("--older-than chooses among the finished runs: give --finished too")
    age = parse_duration(older_than) if isinstance(older_than, str) else older_than
    for run_id in run_ids or ():
        check_run_id(run_id)
    where, archive_dir = os.fspath(source), os.fspath(to)
    await asyncio.to_thread(os.makedirs, archive_dir, exist_ok=True)
    if store_kind(where) == "postgresql":
        return await _from_database(where, archive_dir, run_ids, age)
    return await _from_directory(where, archive_dir, run_ids, age, MoveDisk())


async def chosen(where: str, run_ids: Sequence[str] | None, age: timedelta | None) -> list[str]:
    """The runs named, or the finished ones (older than `age`), oldest activity first."""
    if run_ids is not None:
        return list(dict.fromkeys(run_ids))
    runs = await asyncio.to_thread(list_runs, where, statuses=["finished"])
    if age is not None:
        now = datetime.now(timezone.utc)
        runs = [s for s in runs if moment(s.updated) is not None and not within(s.updated, age, now)]
    return [s.run_id for s in reversed(runs)]


async def _from_directory(
    source: str, archive_dir: str, run_ids: Sequence[str] | None, age: timedelta | None, disk: MoveDisk
) -> ArchiveReport:
    if not os.path.isdir(source):
        raise InvalidInputError(f"{source} is not a run directory")
    same_file_system(source, archive_dir)
    swept = await asyncio.to_thread(sweep, disk, source, archive_dir)
    done: list[ArchivedRun] = []
    store = JsonlStore(source)
    try:
        for run_id in await chosen(source, run_ids, age):
            done.append(await _move_one(store, disk, source, archive_dir, run_id, named=run_ids is not None))
    finally:
        await store.aclose()
    return ArchiveReport(archive_dir, tuple(done), tuple(swept))


async def _move_one(store: JsonlStore, disk: MoveDisk, source: str, archive_dir: str, run_id: str,
                    *, named: bool) -> ArchivedRun:
    there = os.path.join(archive_dir, f"{run_id}.jsonl")
    if not store.exists(run_id):
        if os.path.lexists(there):  # archived already (an archive a crash cut short, run again)
            return ArchivedRun(run_id, "archived", None, await asyncio.to_thread(_finished, there, run_id), there)
        if not named:
            return ArchivedRun(run_id, "refused", "its log went away while archiving")
        raise RunNotFoundError(run_id, source)
    try:
        async with store.lock(run_id):
            log = os.path.join(source, f"{run_id}.jsonl")
            verdict = await asyncio.to_thread(verify_file, log)
            if verdict.status == "corrupt":
                line, message = verdict.problems[0]
                at = f"line {line}: " if line is not None else ""
                return ArchivedRun(run_id, "refused", f"its log is corrupt ({at}{message}): see `polyloop verify`")
            ended = await asyncio.to_thread(_finished, log, run_id)
            await asyncio.to_thread(move, disk, source, archive_dir, run_id)
    except RunActiveError as exc:
        return ArchivedRun(run_id, "refused", f"a live process holds it ({exc.holder or 'another process'})")
    except InvalidInputError as exc:
        return ArchivedRun(run_id, "refused", str(exc))
    return ArchivedRun(run_id, "archived", None, ended, there)


def _finished(log: str, run_id: str) -> bool:
    fd = open_regular(log, follow_symlinks=False)
    with os.fdopen(fd, "rb") as f:
        walker, _ = located_problems(parse_log(f.read()), run_id)
    return walker is not None and walker.finished is not None


async def _from_database(where: str, archive_dir: str, run_ids: Sequence[str] | None,
                         age: timedelta | None) -> ArchiveReport:
    names = await chosen(where, run_ids, age)
    async with open_store(where) as store:
        if not capabilities_of(store).exporting:
            raise InvalidInputError(f"{where} cannot export its runs")
        done = await archive_runs(store, archive_dir, names, named=run_ids is not None)
    return ArchiveReport(archive_dir, tuple(done))

