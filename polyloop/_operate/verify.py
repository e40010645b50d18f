"""Checking logs for corruption (what `polyloop verify` runs): a directory of JSONL log files, or
every run of a PostgreSQL store, read through the store's own read methods."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from .._run.artifacts import ArtifactCheck, judge, judge_digest, refused_artifacts, stream_digest
from ..stores._artifacts import NotRegularArtifactError, read_artifact_file
from .._recovery.walker import Walker, walk
from .._log.codec import ParsedLog, parse_log
from .._log.errors import Problem, RunNotFoundError
from .._log.store_port import capabilities_of
from ..stores._disk import Disk, not_regular_problem
from ..stores._open import open_store
from ..stores._url import store_kind

FileStatus = Literal["ok", "torn_tail", "corrupt", "bad_product"]

_DISK = Disk()  # stateless: reads only regular files, never follows a link or waits on a FIFO


@dataclass(frozen=True, slots=True)
class FileVerdict:
    """The verdict on one log file.

    `problems` holds `(line, message)` pairs; for a torn tail it names the
    line where the tail starts; `line` is None for problems of the whole file.
    `rules` holds, for each problem in the same order, the number of the rule
    of docs/reference/log-format.md it breaks (None for a line that is not a
    record at all, a torn tail or a product).
    `products` checks every product the log references (log format 1.2)
    against `<run_id>.artifacts/` beside it; a missing or altered one makes
    the status `bad_product` (unless the log is corrupt).
    """

    path: str
    run_id: str
    status: FileStatus
    problems: tuple[tuple[int | None, str], ...] = ()
    products: tuple[ArtifactCheck, ...] = ()
    rules: tuple[int | None, ...] = ()

    def rule(self, i: int) -> int | None:
        """The rule the `i`-th problem breaks, or None."""
        return self.rules[i] if i < len(self.rules) else None

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "run_id": self.run_id,
            "status": self.status,
            "problems": [
                {"line": line, "message": msg, "rule": self.rule(i)} for i, (line, msg) in enumerate(self.problems)
            ],
            "products": [p.to_json() for p in self.products],
        }


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """The verdicts on every log under a directory, sorted by path."""

    files: tuple[FileVerdict, ...]

    @property
    def summary(self) -> dict[str, int]:
        counts = {"ok": 0, "torn_tail": 0, "corrupt": 0, "bad_product": 0}
        for f in self.files:
            counts[f.status] += 1
        return counts

    def failed(self, *, strict: bool = False) -> bool:
        """Whether CI should fail: any corruption or bad product (or, with `strict`, any torn tail)."""
        s = self.summary
        return bool(s["corrupt"] or s["bad_product"] or (strict and s["torn_tail"]))

    def to_json(self) -> dict[str, Any]:
        return {"files": [f.to_json() for f in self.files], "summary": self.summary}


def verify_file(path: str | os.PathLike[str]) -> FileVerdict:
    """Decode every line of one log and apply every invariant of the classifier.

    A path that is not a regular file (a symbolic link, a FIFO, a device, a
    directory) is `corrupt` with a message saying what it is: it is never
    followed, never waited on and never read beyond a bounded size.
    """
    p = Path(path)
    run_id = p.name[: -len(".jsonl")] if p.name.endswith(".jsonl") else p.name
    try:
        data = _DISK.read(str(p))
    except OSError as exc:
        problem = not_regular_problem(str(p), exc)
        message = problem.message if problem is not None else f"cannot read: {exc.strerror or exc}"
        return FileVerdict(str(p), run_id, "corrupt", ((None, message),))
    parsed = parse_log(data)
    walker, found = located_problems(parsed, run_id)
    if found:
        return corrupt_verdict(str(p), run_id, found)
    assert walker is not None
    problems: list[tuple[int | None, str]] = []
    products = _artifacts(p, walker)
    # (changes a person accepted on the record are not bad)
    bad = [(None, c.sentence()) for c in refused_artifacts(products, walker)]
    if parsed.torn_line is not None:
        message = "torn tail: the last write was cut off by a crash (dropped on read)"
        problems.append((parsed.torn_line, message))
    if bad:
        return FileVerdict(str(p), run_id, "bad_product", tuple(bad + problems), products)
    if parsed.torn_line is not None:
        return FileVerdict(str(p), run_id, "torn_tail", tuple(problems), products)
    return FileVerdict(str(p), run_id, "ok", (), products)


def located_problems(parsed: ParsedLog, run_id: str) -> tuple[Walker | None, list[Problem]]:
    """What makes a parsed log corrupt, each problem with its line: the lines that are not
    records, else the classifier's (then also its walker, for what a verdict reads next)."""
    if parsed.problems:
        return None, list(parsed.problems)
    walker = walk(parsed.records, run_id=run_id)
    return walker, [parsed.locate(q) for q in walker.problems]


def corrupt_verdict(path: str, run_id: str, problems: Sequence[Problem]) -> FileVerdict:
    """The verdict on a log with these problems (located: each with its line), rules kept."""
    pairs = tuple((q.line, q.message) for q in problems)
    return FileVerdict(path, run_id, "corrupt", pairs, rules=tuple(q.rule for q in problems))


def _artifacts(log: Path, walker: Walker) -> tuple[ArtifactCheck, ...]:
    """The log's products, checked against the folder beside it (as `JsonlStore.get_product` reads them).

    A product that is not a regular file (a symbolic link, a FIFO), or in a
    folder that is a link, is never followed: it counts as missing, saying
    what is in its place. One that cannot be read counts as missing too.
    """
    if not walker.artifacts:
        return ()
    folder = str(log.parent / f"{log.name[: -len('.jsonl')]}.artifacts")
    in_flight = bool(walker.in_flight())
    checks = []
    for ref in walker.artifacts.values():
        data: bytes | None = None
        instead: str | None = None
        try:
            data = read_artifact_file(folder, ref.name, _DISK.read)
        except NotRegularArtifactError as exc:
            instead = exc.instead
        except OSError:
            pass
        checks.append(judge(ref, data, in_flight=in_flight, instead=instead))
    return tuple(checks)


def _ignore_sigint() -> None:
    # A worker interrupted mid-task leaves the pool waiting for it forever.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _verify_many(paths: list[str]) -> list[FileVerdict]:
    return [verify_file(p) for p in paths]


def find_logs(directory: str | os.PathLike[str]) -> list[Path]:
    """Every entry named `*.jsonl` under `directory`, sorted, whatever its type.

    Regular files are logs; anything else with a log's name (a symbolic
    link, a FIFO, a directory) is listed too, so that `verify_file` reports
    it instead of it being skipped in silence. Symbolic links to directories
    are not descended into.

    Raises:
        FileNotFoundError: the directory does not exist.
        NotADirectoryError: it is not a directory.
    """
    root = Path(directory)
    if not root.exists():
        raise FileNotFoundError(f"no directory {root}")
    if not root.is_dir():
        raise NotADirectoryError(f"{root} is not a directory")
    found = []
    for here, dirs, files in os.walk(root):
        found += [Path(here, name) for name in (*dirs, *files) if name.endswith(".jsonl")]
        # A run's product folder holds products, not logs (a product may be named `x.jsonl`).
        dirs[:] = [d for d in dirs if not (d.endswith(".artifacts") and f"{d[: -len('.artifacts')]}.jsonl" in files)]
    return sorted(found)


def verify_logs(
    directory: str | os.PathLike[str],
    *,
    workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> VerifyReport:
    """Check every `*.jsonl` log under `directory`, spread over the machine's cores; or, given a
    `postgresql://` URL, every run's log in that database (as `verify_store`).

    Torn tails (a normal crash artefact) are reported as `torn_tail`;
    anything a correct writer cannot produce as `corrupt`, with the line.
    Nothing is modified.

    Args:
        directory: the directory to search (recursively), or a PostgreSQL
            URL (then this runs its own event loop: call it outside one).
        workers: processes to use (default: one per core; 1 means in-process).
        progress: called with `(files_done, files_total)` as work completes.

    Raises:
        FileNotFoundError, NotADirectoryError: `directory` is not a directory.
        StoreError: the database cannot be reached or failed.
    """
    if isinstance(directory, str) and store_kind(directory) == "postgresql":
        return asyncio.run(_verify_database(directory, progress))
    paths = [str(p) for p in find_logs(directory)]
    total = len(paths)
    workers = workers or os.cpu_count() or 1
    verdicts: list[FileVerdict] = []
    if workers <= 1 or total < 64:
        for path in paths:
            verdicts.append(verify_file(path))
            if progress:
                progress(len(verdicts), total)
    else:
        size = max(16, min(256, total // (workers * 8) or 1))
        chunks = [paths[i : i + size] for i in range(0, total, size)]
        pool = ProcessPoolExecutor(max_workers=workers, initializer=_ignore_sigint)
        try:
            for batch in pool.map(_verify_many, chunks):
                verdicts.extend(batch)
                if progress:
                    progress(len(verdicts), total)
        except BaseException:
            # Ctrl-C reaches the whole process group; only this process acts on
            # it (the workers ignore SIGINT), dropping the work not yet started.
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
    return VerifyReport(tuple(sorted(verdicts, key=lambda v: v.path)))


class RunLogs(Protocol):
    """What `verify_store` reads of a store: where it is, its runs, and each run's parsed log; with
    the products capability also each run's products, streamed (`PostgresStore`)."""

    @property
    def where(self) -> str: ...

    async def list_runs(self) -> list[str]: ...

    async def read_parsed(self, run_id: str) -> ParsedLog: ...

    async def product_names(self, run_id: str) -> dict[str, tuple[int, str]]: ...

    def product_chunks(self, run_id: str, name: str) -> AsyncIterator[bytes]: ...


async def verify_store(store: RunLogs, *, progress: Callable[[int, int], None] | None = None) -> VerifyReport:
    """Check every run's log in a database store (`PostgresStore`), as `verify_logs` checks a directory.

    Each run becomes a `FileVerdict` whose `path` is `postgresql://<where>/<run_id>` and
    whose problem lines are record positions (line N = `seq` N-1). A torn
    tail cannot exist there. Nothing is modified.

    Raises:
        StoreError: the database cannot be reached or failed.
    """
    run_ids = await store.list_runs()
    verdicts = []
    for done, run_id in enumerate(run_ids, start=1):
        path = f"postgresql://{store.where}/{run_id}"
        try:
            parsed = await store.read_parsed(run_id)
        except RunNotFoundError:  # removed meanwhile
            continue
        walker, problems = located_problems(parsed, run_id)
        if problems or walker is None:
            verdicts.append(corrupt_verdict(path, run_id, problems))
        else:
            verdicts.append(await _stored_verdict(store, path, run_id, walker))
        if progress:
            progress(done, len(run_ids))
    return VerifyReport(tuple(sorted(verdicts, key=lambda v: v.path)))


async def _stored_verdict(store: RunLogs, path: str, run_id: str, walker: Walker) -> FileVerdict:
    """A sound log's verdict in a database: each product it references hashed as stored (streamed)."""
    if not walker.artifacts or not capabilities_of(store).artifacts:
        return FileVerdict(path, run_id, "ok")
    stored = await store.product_names(run_id)
    in_flight = bool(walker.in_flight())
    checks = []
    for ref in walker.artifacts.values():
        if ref.name not in stored:
            checks.append(ArtifactCheck(ref, "missing"))
            continue
        size, digest = await stream_digest(store.product_chunks(run_id, ref.name))
        if (size, digest) != stored[ref.name]:  # the chunks are not the content their address names
            checks.append(ArtifactCheck(ref, "unsettled" if in_flight else "altered", size, digest))
            continue
        checks.append(judge_digest(ref, size, digest, in_flight=in_flight))
    bad = [(None, c.sentence()) for c in refused_artifacts(checks, walker)]
    if bad:
        return FileVerdict(path, run_id, "bad_product", tuple(bad), tuple(checks))
    return FileVerdict(path, run_id, "ok", (), tuple(checks))


async def _verify_database(url: str, progress: Callable[[int, int], None] | None) -> VerifyReport:
    store: Any = open_store(url)
    async with store:
        report: VerifyReport = await verify_store(store, progress=progress)
    return report
