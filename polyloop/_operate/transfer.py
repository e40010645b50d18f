"""Moving runs between stores: `export` writes runs as JSONL logs with their products, `import` loads
verified logs into a PostgreSQL store under the same run ids.

An exported run is what `verify` accepts and what a `JsonlStore` reads:
`DIR/<run_id>.jsonl` (the records, one a line, the bytes the JSONL store
would hold) and `DIR/<run_id>.artifacts/<name>` for every product its log
references (latest reference per name). Products are written first, each
to a temporary file, fsync'd and renamed; then the log, published with
`link(2)` (never over another file) and the directory fsync'd. Files
already there with the same bytes are the same export (exporting twice is
harmless: the run is `unchanged`); other bytes are a conflict and the run is refused.
A product missing or altered in the store (as `verify` judges it) refuses
the run before any of its files is put in place.

Import verifies each log (`verify_file`: a corrupt log or a bad product is
refused; a torn tail is dropped, as every reader drops it; a run a live
process holds in its directory is refused, as export refuses one) and loads it,
products included, in one transaction (`PostgresStore.load_run`). A run id
that already has the same records and products is `unchanged`; one with
other content is refused as a conflict, and nothing is written. The run
keeps its records exactly, so it resumes there as it would have where it
came from: done executions stay done, unknown ones stay unknown.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import os
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .._files import read_regular
from .._log.codec import parse_log
from .._log.errors import InvalidInputError, RunActiveError, RunNotFoundError
from .._log.ids import check_run_id
from .._log.store_port import capabilities_of
from .._recovery.walker import Walker
from .._run.artifacts import ArtifactCheck, judge, judge_digest, refused_artifacts
from ..stores._artifacts import NotRegularArtifactError
from ..stores._disk import Disk
from ..stores._jsonl import JsonlStore
from ..stores._open import open_store
from ..stores._products import CHUNK, ProductFile
from ..stores._url import store_kind
from .shapes import JSON_SCHEMA
from .verify import find_logs, located_problems, verify_file

Outcome = Literal["exported", "imported", "unchanged", "refused"]


class Conflict(Exception):
    """The destination already holds other content under the run's id (the run is refused)."""


class Refused(Exception):
    """The run cannot be moved (a corrupt log, a live holder); it stays where it is."""


@dataclass(frozen=True, slots=True)
class MovedRun:
    """What `export` or `import` did with one run.

    Attributes:
        run_id: the run.
        outcome: `exported`, `imported`, `unchanged` (the destination held
            exactly this run already) or `refused` (`reason` says why).
        reason: why it was refused (None otherwise).
        conflict: refused because the destination holds other content under its id.
        path: the exported log (export) or the imported file (import).
        products: how many products moved with it.
        finished: whether the run had finished.
    """

    run_id: str
    outcome: Outcome
    reason: str | None = None
    conflict: bool = False
    path: str | None = None
    products: int = 0
    finished: bool | None = None

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "outcome": self.outcome, "reason": self.reason, "conflict": self.conflict,
                "path": self.path, "products": self.products, "finished": self.finished}


@dataclass(frozen=True, slots=True)
class TransferReport:
    """What `export` or `import` did: one `MovedRun` per run, in order.

    Attributes:
        action: `export` or `import`.
        source: where the runs came from (a store's place, or the directories).
        to: where they went.
        runs: one entry per run.
    """

    action: Literal["export", "import"]
    source: str
    to: str
    runs: tuple[MovedRun, ...]

    @property
    def failed(self) -> bool:
        """Whether some run was refused."""
        return any(r.outcome == "refused" for r in self.runs)

    @property
    def conflicted(self) -> bool:
        """Whether every refusal was a conflict (the destination holds other content under the id)."""
        refused = [r for r in self.runs if r.outcome == "refused"]
        return bool(refused) and all(r.conflict for r in refused)

    def to_json(self) -> dict[str, Any]:
        """The document `polyloop export --json` / `import --json` prints (docs/reference/json.md)."""
        counts = {k: sum(r.outcome == k for r in self.runs) for k in ("exported", "imported", "unchanged", "refused")}
        return {"schema": JSON_SCHEMA, "action": self.action, "from": self.source, "to": self.to,
                "runs": [r.to_json() for r in self.runs], "summary": counts}


# -- export ---------------------------------------------------------------------------------


async def export_runs(store_spec: str, run_ids: Sequence[str], *, to: str | os.PathLike[str]) -> TransferReport:
    """Write each run of the store as `<to>/<run_id>.jsonl` with its products beside it.

    Args:
        store_spec: a `postgresql://` URL or a run directory.
        run_ids: the runs (each must have a log).
        to: the destination directory (created if missing).

    Raises:
        InvalidInputError: an unsafe run id, or `to` is not a directory.
        RunNotFoundError: a named run has no log.
        StoreError: the store failed.
    """
    for run_id in run_ids:
        check_run_id(run_id)
    folder = _destination(to)
    store: Any = open_store(store_spec)
    done: list[MovedRun] = []
    async with store:
        for run_id in run_ids:
            done.append(await _export_one(store, run_id, folder))
    where = store.where if store_kind(store_spec) == "postgresql" else os.fspath(store_spec)
    return TransferReport("export", where, folder, tuple(done))


def _destination(to: str | os.PathLike[str]) -> str:
    folder = os.fspath(to)
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise InvalidInputError(f"cannot export into {folder}: {exc.strerror or exc}") from exc
    return folder


async def _export_one(store: Any, run_id: str, folder: str) -> MovedRun:
    try:
        data = await _log_bytes(store, run_id)
        walker = checked(data, run_id)
        written = await write_run_files(store, run_id, data, walker, folder)
    except RunActiveError as exc:
        return MovedRun(run_id, "refused", f"a live process holds it ({exc.holder or 'another process'})")
    except Conflict as exc:
        return MovedRun(run_id, "refused", str(exc), conflict=True)
    except Refused as exc:
        return MovedRun(run_id, "refused", str(exc))
    path = os.path.join(folder, f"{run_id}.jsonl")
    outcome: Outcome = "exported" if written.fresh else "unchanged"
    return MovedRun(run_id, outcome, None, False, path, written.products, walker.finished is not None)


async def _log_bytes(store: Any, run_id: str) -> bytes:
    if capabilities_of(store).exporting:  # a database: the store hands it out, refusing a held run
        data: bytes = await store.log_text(run_id)
        return data
    if capabilities_of(store).holding:
        holder = store.holder(run_id)
        holder = await holder if inspect.isawaitable(holder) else holder
        if holder:
            raise RunActiveError(run_id, holder)
    try:
        return await asyncio.to_thread(read_regular, store.directory / f"{run_id}.jsonl", follow_symlinks=False)
    except FileNotFoundError:
        raise RunNotFoundError(run_id, str(store.directory)) from None


def checked(data: bytes, run_id: str) -> Walker:
    """The log's walker; `Refused` when it is corrupt."""
    walker, problems = located_problems(parse_log(data), run_id)
    if problems or walker is None:
        first = problems[0]
        at = f"line {first.line}: " if first.line is not None else ""
        raise Refused(f"its log is corrupt ({at}{first.message}): see `polyloop verify`")
    return walker


@dataclass(frozen=True, slots=True)
class Written:
    """What `write_run_files` wrote: how many products, and whether any file was new (False: the
    destination held exactly these files already)."""

    products: int
    fresh: bool


@dataclass(frozen=True, slots=True)
class _Staged:
    tmp: str
    path: str
    size: int
    digest: str


async def write_run_files(store: Any, run_id: str, data: bytes, walker: Walker, folder: str) -> Written:
    """Write the run's referenced products, then its log, durably into `folder`.

    The products are streamed into temporary files and checked against the
    log's references first, as `verify` checks them: a missing or altered
    product (no accepted change covers it) refuses the run before anything
    is put in place.

    Raises:
        Conflict: `folder` holds other bytes under the log's or a product's name.
        Refused: a product the log references is missing or altered in the store.
    """
    disk = Disk()
    count = 0
    fresh = False
    if walker.artifacts and capabilities_of(store).artifacts:
        products = os.path.join(folder, f"{run_id}.artifacts")
        await asyncio.to_thread(os.makedirs, products, exist_ok=True)
        staged: list[_Staged] = []
        try:
            checks = []
            in_flight = bool(walker.in_flight())
            for name, ref in walker.artifacts.items():
                try:
                    got = await _stage_product(store, run_id, name, os.path.join(products, name), disk)
                except NotRegularArtifactError as exc:  # a directory's: a link or a FIFO in its place
                    checks.append(judge(ref, None, in_flight=in_flight, instead=exc.instead))
                    continue
                if got is not None:
                    staged.append(got)
                checks.append(_judged(ref, got, in_flight))
            bad = refused_artifacts(checks, walker)
            if bad:
                _discard(disk, staged)  # the temporary files first: the directory is then empty
                staged.clear()
                with contextlib.suppress(OSError):
                    os.rmdir(products)  # made for this run: leave nothing behind
                raise Refused(f"its {bad[0].sentence()} in the store (`polyloop verify --store` checks every "
                              "product): nothing of the run was written")
            for item in staged:
                fresh = _settle(disk, item.tmp, item.path, item.digest) or fresh
                count += 1
        finally:
            _discard(disk, staged)  # (a product put in place has no temporary file left)
        await asyncio.to_thread(disk.fsync_dir, products)
        await asyncio.to_thread(disk.fsync_dir, folder)
    fresh = await asyncio.to_thread(_publish, disk, folder, os.path.join(folder, f"{run_id}.jsonl"), data) or fresh
    return Written(count, fresh)


def _discard(disk: Disk, staged: list[_Staged]) -> None:
    """Remove the temporary files of staged products (those not put in place)."""
    for item in staged:
        with contextlib.suppress(OSError):
            disk.unlink(item.tmp)


def _judged(ref: Any, got: _Staged | None, in_flight: bool) -> ArtifactCheck:
    """The product as exported, against its reference (as `verify` judges the file it will be)."""
    if got is None:
        return judge(ref, None, in_flight=in_flight)
    return judge_digest(ref, got.size, got.digest, in_flight=in_flight)


async def _stage_product(store: Any, run_id: str, name: str, path: str, disk: Disk) -> _Staged | None:
    """Stream one product into a temporary file beside `path`, fsync'd; None when the store has none."""
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = disk.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    h = hashlib.sha256()
    size = 0
    keep = False
    try:
        try:
            async for chunk in _product_chunks(store, run_id, name):
                h.update(chunk)
                size += len(chunk)
                await asyncio.to_thread(disk.write, fd, chunk)
            await asyncio.to_thread(disk.fsync, fd)
        finally:
            disk.close(fd)
        keep = size > 0 or await store.get_product(run_id, name) is not None
    finally:
        if not keep:
            with contextlib.suppress(OSError):
                disk.unlink(tmp)
    return _Staged(tmp, path, size, h.hexdigest()) if keep else None


def _settle(disk: Disk, tmp: str, path: str, digest: str) -> bool:
    """Put the product in place; False when the same bytes were there already."""
    try:
        existing = _file_digest(path)
    except FileNotFoundError:
        disk.rename(tmp, path)
        return True
    if existing != digest:
        raise Conflict(f"the destination already has a different product {path}: nothing of the run was written over")
    return False


async def _product_chunks(store: Any, run_id: str, name: str) -> AsyncIterator[bytes]:
    if capabilities_of(store).exporting:  # a database streams its products; a folder's are files
        async for chunk in store.product_chunks(run_id, name):
            yield chunk
        return
    data = await store.get_product(run_id, name)
    for i in range(0, len(data or b""), CHUNK):
        yield data[i : i + CHUNK]


def _file_digest(path: str) -> str:
    h = hashlib.sha256()
    for chunk in _file_chunks(path):
        h.update(chunk)
    return h.hexdigest()


def _file_chunks(path: str) -> Iterator[bytes]:
    with open(path, "rb") as f:  # noqa: PTH123
        while chunk := f.read(CHUNK):
            yield chunk


def _publish(disk: Disk, directory: str, path: str, data: bytes) -> bool:
    """Write `data` at `path` durably, never over another file (an identical one is the same export:
    False)."""
    try:
        if read_regular(path, follow_symlinks=False) == data:
            return False
        raise Conflict(f"the destination already has a different {os.path.basename(path)}: nothing was written over it")
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise Refused(f"the destination's {os.path.basename(path)} cannot be read: {exc.strerror or exc}") from exc
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
    return True


# -- import ---------------------------------------------------------------------------------


async def import_runs(directories: Sequence[str | os.PathLike[str]], *, store_spec: str) -> TransferReport:
    """Load every verified log under `directories` (with its products) into a PostgreSQL store.

    Raises:
        InvalidInputError: the store is not a PostgreSQL URL, or a directory does not exist.
        StoreError: the database failed.
    """
    if store_kind(store_spec) != "postgresql":
        raise InvalidInputError(
            f"import loads runs into a PostgreSQL store (--store postgresql://...), not {store_spec}: "
            "a run directory is already what export writes"
        )
    logs: list[Path] = []
    for directory in directories:
        try:
            logs += find_logs(directory)
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise InvalidInputError(f"cannot import from {os.fspath(directory)}: {exc}") from exc
    store: Any = open_store(store_spec)
    async with store:
        done = [await _import_one(store, log) for log in logs]
    return TransferReport("import", ", ".join(os.fspath(d) for d in directories), store.where, tuple(done))


async def _import_one(store: Any, log: Path) -> MovedRun:
    run_id = log.name[: -len(".jsonl")]
    try:
        check_run_id(run_id)
    except InvalidInputError as exc:
        return MovedRun(run_id, "refused", str(exc), path=str(log))
    holder = await asyncio.to_thread(JsonlStore(log.parent).holder, run_id)
    if holder:  # its log is still growing: a copy would be resumable beside the live run
        return MovedRun(run_id, "refused", f"a live process holds it where it is ({holder}): import it once it let go",
                        path=str(log))
    verdict = await asyncio.to_thread(verify_file, log)
    if verdict.status in ("corrupt", "bad_product"):
        first = verdict.problems[0][1] if verdict.problems else verdict.status
        return MovedRun(run_id, "refused", f"`polyloop verify` refuses it ({verdict.status}: {first})", path=str(log))
    data = await asyncio.to_thread(read_regular, log, follow_symlinks=False)
    parsed = parse_log(data)
    raw = data.split(b"\n")
    lines = [(r.TAG, raw[n - 1].decode()) for r, n in zip(parsed.records, parsed.lines)]
    walker = checked(data, run_id)
    folder = log.parent / f"{run_id}.artifacts"
    products = [p for name in walker.artifacts if (p := await asyncio.to_thread(_product_file, folder / name, name))]
    try:
        loaded = await store.load_run(run_id, lines, products, finished=walker.finished is not None)
    except RunActiveError as exc:
        return MovedRun(run_id, "refused", f"a live process holds it there ({exc.holder or 'another process'})",
                        path=str(log))
    if loaded == "different":
        why = f"{store.where} already has run {run_id} with other content: nothing was written"
        return MovedRun(run_id, "refused", why, conflict=True, path=str(log))
    outcome: Outcome = "imported" if loaded == "loaded" else "unchanged"
    return MovedRun(run_id, outcome, None, False, str(log), len(products), walker.finished is not None)


def _product_file(path: Path, name: str) -> ProductFile | None:
    """The product file to load, hashed as it is now (streamed); None when it is gone (accepted as missing)."""
    h = hashlib.sha256()
    size = 0
    try:
        for chunk in _file_chunks(str(path)):
            h.update(chunk)
            size += len(chunk)
    except FileNotFoundError:
        return None
    return ProductFile(name, size, h.hexdigest(), lambda: _file_chunks(str(path)))
