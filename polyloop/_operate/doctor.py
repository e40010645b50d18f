"""Checking that a store and an agent are ready for runs (what `polyloop doctor` runs).

Each check is one `DoctorCheck`: a name, whether it passed, and one sentence. The
store is probed the way runs use it and left as it was: a directory gets a
probe file (created exclusively, written, fsynced with its directory,
locked with the run lock's `flock`, read back, removed); a PostgreSQL
database gets a probe row (committed synchronously, deleted). Neither
creates anything a run would see, and a missing directory or schema is
never created.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from .._files import open_regular
from .._log.decode import schema_major
from .._log.errors import PolyLoopError
from .._log.records import SCHEMA_VERSION, SUPPORTED_MAJOR
from .._run.target import load_target
from ..stores._open import postgres_class
from ..stores._url import redact_url, store_kind

_FIRST_LINE = 1 << 20  # bytes of a log read to find its run_started


@dataclass(frozen=True, slots=True)
class DoctorCheck:
    """One check of `doctor`: its name, whether it passed, and what was found.

    Names: `store` (where runs live), `write` (a durable write works there),
    `logs` (the log format versions found, all readable by this library),
    `server`, `durability` and `schema` (PostgreSQL only), `target` (the
    agent imports).
    """

    name: str
    ok: bool
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


async def doctor(where: str, *, target: str | None = None, timeout: float = 5.0) -> list[DoctorCheck]:
    """Check the store `where` (a directory or a `postgresql://` URL) and, if given, an agent target.

    Args:
        where: the store, as `open_store` takes it.
        target: `path/to/file.py:name` or `module:name`; imported (its
            module's top-level code runs) and checked to be an `Agent`.
        timeout: seconds to wait for a database to answer.

    Returns:
        The checks in order; every one is made even when an earlier one failed,
        except those a failed one makes meaningless (no write probe when the
        server cannot be reached).

    Raises:
        StoreUrlError: `where` is a URL of a scheme PolyLoop does not serve.
    """
    if store_kind(where) == "postgresql":
        checks = await _postgres(where, timeout)
    else:
        checks = await asyncio.to_thread(_directory, Path(where))
    if target is not None:
        checks.append(_target(target))
    return checks


async def _postgres(url: str, timeout: float) -> list[DoctorCheck]:
    checks = [DoctorCheck("store", True, f"PostgreSQL database {redact_url(url)}")]
    try:
        postgres_class()
    except PolyLoopError as exc:  # psycopg is not installed
        return [*checks, DoctorCheck("server", False, str(exc))]
    from ..stores._pg_doctor import pg_checks  # psycopg is there (the extra)

    found, versions = await pg_checks(url, timeout=timeout)
    checks += [DoctorCheck(*c) for c in found]
    if versions is not None:
        checks.append(log_versions(versions))
    return checks


def _directory(path: Path) -> list[DoctorCheck]:
    if path.is_dir():
        store = DoctorCheck("store", True, f"directory {path} (JSONL logs)")
        probe_in = path
    elif path.exists() or path.is_symlink():
        return [DoctorCheck("store", False, f"{path} is not a directory")]
    else:
        parent = next((p for p in path.parents if p.is_dir()), Path("."))
        store = DoctorCheck("store", True, f"directory {path} does not exist yet: the first run creates it (in {parent})")
        probe_in = parent
    return [store, _write_probe(probe_in), log_versions(_versions(path))]


def _write_probe(folder: Path) -> DoctorCheck:
    name = folder / f".polyloop-doctor-{os.getpid()}-{os.urandom(4).hex()}.probe"
    data = b"polyloop doctor probe\n"
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, data)
            started = time.perf_counter()
            os.fsync(fd)
            fsync = time.perf_counter() - started
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the run lock's kind
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
        _fsync_dir(folder)
        if Path(name).read_bytes() != data:
            return DoctorCheck("write", False, f"a probe file in {folder} read back different bytes")
    except OSError as exc:
        return DoctorCheck("write", False, f"cannot write, fsync and lock a file in {folder}: {exc.strerror or exc}")
    finally:
        _remove(name, folder)
    return DoctorCheck("write", True, f"a probe file written, fsynced ({fsync * 1000:.1f} ms), locked and removed in {folder}")


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove(name: Path, folder: Path) -> None:
    try:
        os.unlink(name)
        _fsync_dir(folder)
    except OSError:
        pass  # never created, or already gone


def _versions(path: Path) -> Counter[str]:
    """How many logs of the directory started with each log format version (`?` when unreadable)."""
    found: Counter[str] = Counter()
    if not path.is_dir():
        return found
    with os.scandir(path) as entries:
        logs = [e.path for e in entries if e.name.endswith(".jsonl") and e.is_file(follow_symlinks=False)]
    for log in logs:
        found[_version_of(log)] += 1
    return found


def _version_of(log: str) -> str:
    try:
        fd = open_regular(log, follow_symlinks=False)
        try:
            head = os.pread(fd, _FIRST_LINE, 0)
        finally:
            os.close(fd)
        version = orjson.loads(head.split(b"\n", 1)[0]).get("schema_version")
    except (OSError, orjson.JSONDecodeError, AttributeError):
        return "?"
    return version if isinstance(version, str) else "?"


def log_versions(found: Counter[str]) -> DoctorCheck:
    """The log format versions the runs were started with, and whether this library reads them all."""
    if not found:
        return DoctorCheck("logs", True, "no run logs yet")
    total = sum(found.values())
    logs = f"{total} log" + ("" if total == 1 else "s")
    listed = ", ".join(f"{v} ({n})" for v, n in sorted(found.items()))
    unreadable = found.get("?", 0)
    unknown = sorted(v for v in found if v != "?" and schema_major(v) != SUPPORTED_MAJOR)
    note = f"; {unreadable} without a readable first record (polyloop verify says why)" if unreadable else ""
    if unknown:
        return DoctorCheck("logs", False, f"{logs}, format {listed}: this library (format {SCHEMA_VERSION}) cannot "
                                    f"read {', '.join(unknown)}{note}")
    return DoctorCheck("logs", True, f"{logs}, format {listed} (this library writes {SCHEMA_VERSION}){note}")


def _target(target: str) -> DoctorCheck:
    try:
        agent = load_target(target)
    except PolyLoopError as exc:
        return DoctorCheck("target", False, str(exc))
    tools = ", ".join(t.name for t in agent.tools) or "no tools"
    return DoctorCheck("target", True, f"{target} is an Agent: model {type(agent.model).__name__}, tools {tools}")
