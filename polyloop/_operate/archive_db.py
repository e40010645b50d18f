"""Archiving runs of a PostgreSQL store: each exported as `export` writes it (`DIR/<run_id>.jsonl`
and its products in `DIR/<run_id>.artifacts/`), then deleted, in one transaction per run (the
store's `export_and_delete`).

The log is verified first (a corrupt one is refused and stays); the
products are streamed out and fsync'd, the log published with `link(2)`
(never over another file) and the directory fsync'd (`transfer.write_run_files`);
only then is the deletion committed. A crash between the two leaves the run
in the database and a whole copy in the archive: archiving it again finds
the copy identical and finishes.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from .._log.errors import RunActiveError, RunNotFoundError
from .archive_report import ArchivedRun
from .transfer import Conflict, Refused, checked, write_run_files


class _Refused(Exception):
    """The run's log cannot be archived (it stays in the database)."""


async def archive_runs(store: Any, archive_dir: str, run_ids: Sequence[str], *, named: bool) -> list[ArchivedRun]:
    """Archive each run of `run_ids` from `store` (an `ExportingStore`) into `archive_dir`."""
    done: list[ArchivedRun] = []
    for run_id in run_ids:
        path = os.path.join(archive_dir, f"{run_id}.jsonl")
        ended: list[bool] = []

        async def keep(data: bytes, run_id: str = run_id, ended: list[bool] = ended) -> None:
            try:
                walker = checked(data, run_id)
            except Refused as exc:
                raise _Refused(str(exc)) from None
            ended.append(walker.finished is not None)
            try:
                await write_run_files(store, run_id, data, walker, archive_dir)
            except (Conflict, Refused) as exc:
                raise _Refused(str(exc).replace("the destination", "the archive")) from None

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
