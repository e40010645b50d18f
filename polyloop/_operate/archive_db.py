"""Archiving runs of a PostgreSQL store: each exported to `DIR/<run_id>.jsonl`, then deleted, in one
transaction per run (the store's `export_and_delete`).

The log is verified first (a corrupt one is refused and stays), written to
a temporary file, fsync'd and published with `link(2)` (never over another
file), and the directory fsync'd; only then is the deletion committed. A
crash between the two leaves the run in the database and a whole copy in
the archive: archiving it again finds the copy identical and finishes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Sequence
from typing import Any

from .._files import read_regular
from .._log.codec import parse_log
from .._log.errors import RunActiveError, RunNotFoundError
from ..stores._disk import Disk
from .archive_report import ArchivedRun
from .verify import located_problems


class _Refused(Exception):
    """The run's log cannot be archived (it stays in the database)."""


async def export_runs(store: Any, archive_dir: str, run_ids: Sequence[str], *, named: bool,
                      disk: Disk | None = None) -> list[ArchivedRun]:
    """Archive each run of `run_ids` from `store` (an `ExportingStore`) into `archive_dir`."""
    disk = disk or Disk()
    done: list[ArchivedRun] = []
    for run_id in run_ids:
        path = os.path.join(archive_dir, f"{run_id}.jsonl")
        ended: list[bool] = []

        async def keep(data: bytes, run_id: str = run_id, path: str = path, ended: list[bool] = ended) -> None:
            ended.append(_checked(data, run_id))
            await asyncio.to_thread(_publish, disk, archive_dir, path, data)

        try:
            await store.export_and_delete(run_id, keep)
        except RunActiveError as exc:
            done.append(ArchivedRun(run_id, "refused", f"a live process holds it ({exc.holder or 'another process'})"))
            continue
        except RunNotFoundError:
            if named:
                raise
            done.append(ArchivedRun(run_id, "refused", "its log went away while archiving"))
            continue
        except _Refused as exc:
            done.append(ArchivedRun(run_id, "refused", str(exc)))
            continue
        done.append(ArchivedRun(run_id, "archived", None, ended[0] if ended else None, path))
    return done


def _checked(data: bytes, run_id: str) -> bool:
    """Whether the run had finished; `_Refused` when its log is corrupt."""
    parsed = parse_log(data)
    walker, problems = located_problems(parsed, run_id)
    if problems:
        first = problems[0]
        at = f"line {first.line}: " if first.line is not None else ""
        raise _Refused(f"its log is corrupt ({at}{first.message}): see `polyloop verify --store`")
    return walker is not None and walker.finished is not None


def _publish(disk: Disk, directory: str, path: str, data: bytes) -> None:
    """Write `data` at `path` durably, never over another file (an identical one is the same export)."""
    try:
        if read_regular(path, follow_symlinks=False) == data:
            return  # exported before a crash that came ahead of the deletion's commit
        raise _Refused(f"the archive already has a different {os.path.basename(path)}: nothing was moved")
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise _Refused(f"the archive's {os.path.basename(path)} cannot be read: {exc.strerror or exc}") from exc
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = disk.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        try:
            disk.write(fd, data)
            disk.fsync(fd)
        finally:
            disk.close(fd)
        disk.link(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            disk.unlink(tmp)
    disk.fsync_dir(directory)
