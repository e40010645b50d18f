"""Reading a run's log as it grows: the records appended since the last look.

What `watch_run` polls. Each `Follower.more()` returns the whole records
written since the previous call, in log order, and never a part of one:

* a JSONL log is read from the byte offset where the last complete line
  ended; an unterminated tail (a write in progress, or torn by a crash) is
  left for the next look, so a record is returned once its newline landed.
  The tail a resumed run cuts off, or the newline it adds to a whole last
  record, lies beyond that offset, so neither moves what was returned. A
  log replaced or cut below the offset (rewritten behind the library's
  back) is a `StoreError`;
* a PostgreSQL log is read by position: the rows whose `seq` follows the
  last one returned, in one query (rule 35: a gap is corruption);
* any other store is read whole and the records already returned skipped.
"""

from __future__ import annotations

import asyncio
import os
from typing import Protocol

from .._files import open_regular
from .._log.codec import parse_log
from .._log.errors import CorruptLogError, Problem, RunNotFoundError, SchemaVersionError, StoreError
from .._log.ids import check_run_id
from .._log.records import Record
from .._log.store_port import Store
from ._jsonl import JsonlStore
from ._open import postgres_class

_CHUNK = 1 << 20  # bytes read per system call


class Follower(Protocol):
    """The records of one run appended since the last call."""

    async def more(self) -> list[Record]:
        """Whole records written since the last call (all of them on the first call).

        Raises:
            RunNotFoundError: the run has no log (yet).
            CorruptLogError: a new record cannot come from a correct writer.
            StoreError: the log cannot be read, or was replaced under the reader.
        """
        ...


def follower(store: Store, run_id: str) -> Follower:
    """A `Follower` of `run_id` in `store`, reading only what is new where the store allows it."""
    check_run_id(run_id)
    if isinstance(store, JsonlStore):
        return _JsonlTail(store, run_id)
    try:
        pg = postgres_class()
    except StoreError:  # psycopg is not installed: the store cannot be a PostgresStore
        pg = None
    if pg is not None and isinstance(store, pg):
        from ._pg_follow import PgTail  # psycopg is there: the store is one

        return PgTail(store, run_id)
    return _Reread(store, run_id)


class _JsonlTail:
    def __init__(self, store: JsonlStore, run_id: str) -> None:
        self._run_id = run_id
        self._where = str(store.directory)
        self._path = os.fspath(store.path(run_id))
        self._offset = 0  # where the first line not yet returned starts
        self._lines = 0  # lines before it
        self._inode: int | None = None

    async def more(self) -> list[Record]:
        return await asyncio.to_thread(self._read)

    def _read(self) -> list[Record]:
        data = self._new_bytes()
        end = data.rfind(b"\n")
        if end < 0:
            return []  # nothing new, or only a line still being written
        whole = data[: end + 1]
        parsed = parse_log(whole)
        first_line = self._lines
        self._offset += end + 1
        self._lines += whole.count(b"\n")
        if parsed.schema_version is not None:
            raise SchemaVersionError(self._run_id, parsed.schema_version)
        if parsed.problems:
            raise CorruptLogError(self._run_id, [_shifted(p, first_line) for p in parsed.problems])
        return parsed.records

    def _new_bytes(self) -> bytes:
        try:
            fd = open_regular(self._path, follow_symlinks=False)
        except FileNotFoundError:
            if self._inode is not None:
                raise StoreError(f"the log {self._path} was removed (archived?) while being watched",
                                 run_id=self._run_id) from None
            raise RunNotFoundError(self._run_id, self._where) from None
        except OSError as exc:
            raise StoreError(f"cannot read {self._path}: {exc.strerror or exc}", run_id=self._run_id) from exc
        try:
            st = os.fstat(fd)
            if self._inode is None:
                self._inode = st.st_ino
            elif st.st_ino != self._inode or st.st_size < self._offset:
                raise StoreError(f"the log {self._path} was replaced or cut short while being watched",
                                 run_id=self._run_id)
            chunks, at = [], self._offset
            while chunk := os.pread(fd, _CHUNK, at):
                chunks.append(chunk)
                at += len(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)


def _shifted(p: Problem, lines: int) -> Problem:
    line = None if p.line is None else p.line + lines
    return Problem(p.message, index=p.index, line=line, rule=p.rule)


class _Reread:
    def __init__(self, store: Store, run_id: str) -> None:
        self._store = store
        self._run_id = run_id
        self._seen = 0

    async def more(self) -> list[Record]:
        records = list(await self._store.read_log(self._run_id))
        if len(records) < self._seen:
            raise StoreError(f"the log of run {self._run_id!r} lost records while being watched",
                             run_id=self._run_id)
        new, self._seen = records[self._seen:], len(records)
        return new
