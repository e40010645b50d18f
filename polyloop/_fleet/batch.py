"""Many runs of one agent: `run_batch`, where running the same batch again is the resume.

The parent plans (reads the goals, checks them against the manifest) and
hands runs to worker processes (`polyloop/_fleet/worker.py`), each running up to
`concurrency` runs on its own event loop. A worker that dies is replaced and
the runs it held go back in the queue; they resume by the rules that follow
any crash. See docs/how-to/run-a-thousand-rollouts.md.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from .._run.agent import default_directory
from .manifest import Manifest, batch_lock, load_manifest, manifest_path, reconcile, save_manifest
from .plan import BatchError, BatchLine, check_name, default_name, read_goals
from .report import BatchProgress, BatchReport, BatchRun, count
from .._log import commands
from .._log.errors import TargetError
from .._run.target import load_target
from ..stores._open import postgres_class
from ..stores._url import store_kind

DEFAULT_CONCURRENCY = 16
# A run whose worker process died this many times in one invocation is reported
# `failed` instead of being handed out again (it may be what kills them).
MAX_DEATHS = 3
PROGRESS_EVERY = 0.1


class BatchInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a batch; `report` says where every run stands.

    The runs under way end the call they were in and stop before their next
    one, so each stays resumable; only a second Ctrl-C, which kills the
    workers mid-call, can leave an action unknown (its run then says so).

    A `KeyboardInterrupt`, so code that stops on Ctrl-C still does.
    """

    def __init__(self, report: BatchReport) -> None:
        super().__init__("the batch was interrupted; run it again to resume")
        self.report = report


def run_batch(
    target: str,
    goals: str | os.PathLike[str] | Iterable[str | Mapping[str, Any]],
    *,
    name: str | None = None,
    directory: str | os.PathLike[str] | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
    processes: int | None = None,
    progress: Callable[[BatchProgress], None] | None = None,
    wait_active: float = 10.0,
    lease: float = 15.0,
) -> BatchReport:
    """Run the agent at `target` once per line of `goals`; call it again to resume.

    Each line becomes one run with a deterministic run id (`NAME-LLLLL`, or
    the line's own `run_id`). On every call, finished runs are skipped,
    interrupted ones resumed, runs waiting for an operator left parked, and
    the rest started. A line that differs from what its run (or the batch
    manifest, `DIR/.batch-NAME.json`) recorded is reported `changed` and not
    run: goals are never silently mixed. A line that moved (its goal and
    inputs are a recorded run's of another line) is not started again, no
    new line starts while a recorded line differs, and nothing starts when
    the manifest recorded another `target`. A bad line is reported `invalid`;
    the other lines still run.

    With a `postgresql://` URL as `directory` the runs, their leases and the
    manifest live in that database (docs/reference/stores.md).

    Args:
        target: the agent, `path/to/file.py:name` or `module.path:name`.
        goals: a goals file (JSONL of `{"goal", "run_id"?, "inputs"?}`, or
            one goal per line; its path, or the file opened), or lines as
            Python items: a string is one goal (never parsed as JSON), a
            mapping is a line's object, the two may mix; any other item is
            reported `invalid`.
        name: the batch name (default: the goals file's stem, made safe;
            `batch` for lines given directly).
        directory: where the logs live, or a `postgresql://` URL (default:
            `$POLYLOOP_STORE`, else `$POLYLOOP_DIR`, else `./runs`, as every
            command looks).
        concurrency: runs per worker process at a time.
        processes: worker processes (default: the number of cores).
        progress: called with a `BatchProgress` a few times a second.
        wait_active: seconds to keep trying a run another process holds (a
            killed batch's worker letting go) before reporting it `active`;
            on PostgreSQL at least `lease` + 2 seconds.
        lease: on PostgreSQL, seconds a run's lease lasts unrenewed (as
            `PostgresStore(lease=...)`); ignored for a directory.

    Returns:
        A `BatchReport`, one `BatchRun` per line, by line.

    Raises:
        BatchError: the goals cannot be read or hold no goal (and no
            earlier one was recorded), the name is unsafe, the manifest is
            unreadable, or the batch is already running.
        StoreError: the database cannot be reached or failed (or psycopg is
            not installed).
        StoreUrlError: `directory` is a URL of a scheme PolyLoop does not
            serve (`mysql://...`); nothing was created.
        TargetError: the target cannot be loaded.
        BatchInterrupted: Ctrl-C; its `report` says where each run stands.

    Not guaranteed: a worker killed mid-action leaves an unknown execution
    like any crash (docs/explanation/recovery-model.md).
    """
    _check_sizes(concurrency, processes, lease)
    is_file = isinstance(goals, str | os.PathLike)
    name = check_name(name) if name is not None else (default_name(goals) if is_file else "batch")  # type: ignore[arg-type]
    spec = os.fspath(directory) if directory is not None else (os.environ.get("POLYLOOP_STORE") or default_directory())
    on_database = store_kind(spec) == "postgresql"  # another scheme:// is refused before anything is made
    lines = read_goals(goals, name=name)
    load_target(target)  # a bad target fails before anything is written
    target = _canonical(target)
    if on_database:
        wait_active = max(wait_active, lease + 2.0)  # a killed worker's lease lapses first
    keeper = _database_batch(spec, name) if on_database else _directory_batch(spec, name, lines, goals, is_file)
    settings = dict(processes=processes or _cores(), concurrency=concurrency, progress=progress,
                    wait_active=wait_active, lease=lease)
    return _run_held(keeper, name, target, spec, lines, _no_goals(goals, is_file), settings)


def _run_held(
    keeper: Any, name: str, target: str, spec: str, lines: list[BatchLine], no_goals: BatchError,
    settings: dict[str, Any],
) -> BatchReport:
    """Under the batch's hold: reconcile the lines with its manifest, record what changed, run them."""
    with keeper:
        recorded = keeper.load()
        lines, removed, runs = reconcile(lines, recorded, target=target)
        if not lines and not removed:  # nothing now, nothing before: a wrong or empty file
            raise no_goals
        if runs != recorded.runs or not keeper.saved:
            keeper.save(target=recorded.target or target, runs=runs)  # the first target stays
        supervisor = _Supervisor(name, target, spec, lines, removed, **settings)
        try:
            return supervisor.report(supervisor.run())
        finally:
            _withdraw(keeper, recorded.target or target, runs, supervisor.foreign)


def _check_sizes(concurrency: int, processes: int | None, lease: float) -> None:
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    if processes is not None and processes < 1:
        raise ValueError("processes must be at least 1")
    if lease <= 0:
        raise ValueError("lease must be positive")


def _directory_batch(spec: str, name: str, lines: list[BatchLine], goals: Any, is_file: bool) -> _DirectoryBatch:
    keeper = _DirectoryBatch(Path(spec), name)
    if not lines and not keeper.manifest.exists():  # refused before the hold: nothing is left behind
        raise _no_goals(goals, is_file)
    return keeper


def _withdraw(keeper: Any, target: str, runs: dict[str, dict[str, Any]], foreign: set[str]) -> None:
    # A run id that named another's run was never this batch's: forgotten, so the line
    # can take another id without reading as a moved line.
    if foreign & runs.keys():
        keeper.save(target=target, runs={run_id: e for run_id, e in runs.items() if run_id not in foreign})


def _database_batch(spec: str, name: str) -> Any:
    """The batch's keeper in a database; a clear StoreError when the postgres extra is missing."""
    postgres_class()  # the one StoreError that names the missing postgres extra
    from .pg_batch import DatabaseBatch  # psycopg: imported only when a batch uses a database

    return DatabaseBatch(spec, name)


def _no_goals(goals: Any, is_file: bool) -> BatchError:
    where = f"the goals file {os.fspath(goals)}" if is_file else "the goals given"
    return BatchError(f"{where} has no goals: every line is blank")


class _DirectoryBatch:
    """The hold (`DIR/.batch-NAME.held`) and the manifest (`DIR/.batch-NAME.json`) of a batch in a directory."""

    def __init__(self, where: Path, name: str) -> None:
        self.where = where
        self.name = name
        self.manifest = manifest_path(where, name)
        self.saved = False
        self._hold: contextlib.AbstractContextManager[None] | None = None

    def __enter__(self) -> _DirectoryBatch:
        try:
            self.where.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BatchError(f"cannot create the run directory {self.where}: {exc.strerror}") from exc
        hold = batch_lock(self.where, self.name)
        hold.__enter__()
        self._hold = hold
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._hold is not None:
            self._hold.__exit__(*exc)

    def load(self) -> Manifest:
        recorded = load_manifest(self.manifest)
        self.saved = self.manifest.exists()
        return recorded

    def save(self, *, target: str, runs: dict[str, dict[str, Any]]) -> None:
        save_manifest(self.manifest, name=self.name, target=target, runs=runs)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))  # the cores this process may use (containers, taskset)
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _canonical(target: str) -> str:
    # A file path made absolute, as `polyloop run` records it, so resume works anywhere.
    where, _, attr = target.rpartition(":")
    if where.endswith(".py") or "/" in where or "\\" in where:
        return f"{Path(where).resolve()}:{attr}"
    return target


@dataclass(slots=True)
class _Item:
    key: int
    line: BatchLine
    deaths: int = 0


class _Process:
    """One worker process and the runs it holds."""

    def __init__(self, settings: dict[str, Any]) -> None:
        mine, theirs = socket.socketpair()
        package_root = str(Path(__file__).resolve().parent.parent)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        try:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "polyloop._fleet.worker", str(theirs.fileno()), str(os.getpid())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=sys.stderr.fileno() if _has_fileno(sys.stderr) else subprocess.DEVNULL,
                env=env,
            )
        finally:
            theirs.close()
        self.conn = Connection(mine.detach())
        self.conn.send(settings)
        self.held: dict[int, _Item] = {}
        self.outage: str | None = None  # what its runs wait for when their model is unavailable

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait()
        self.conn.close()


def _has_fileno(stream: Any) -> bool:
    try:
        stream.fileno()
        return True
    except (AttributeError, OSError, ValueError):
        return False


class _Supervisor:
    def __init__(
        self,
        name: str,
        target: str,
        directory: str,
        lines: list[BatchLine],
        removed: list[BatchLine],
        *,
        processes: int,
        concurrency: int,
        progress: Callable[[BatchProgress], None] | None,
        wait_active: float,
        lease: float,
    ) -> None:
        self.name = name
        self.target = target
        self.directory = directory
        self.settings = {
            "sys_path": list(sys.path), "target": target, "directory": directory,
            "wait_active": wait_active, "lease": lease, "concurrency": concurrency,
            "place": commands.serving_now(),  # its messages name the run's place as ours do
        }
        self.total = len(lines) + len(removed)
        self.results: dict[int, BatchRun] = {}
        self.foreign: set[str] = set()  # run ids the workers found to name another's run
        self.queue: deque[_Item] = deque()
        for key, line in enumerate([*lines, *removed]):
            if line.error is not None:
                status = "changed" if line.changed else "invalid"
                self.results[key] = BatchRun(line.run_id, line.line, status, 0, line.error)  # type: ignore[arg-type]
            else:
                self.queue.append(_Item(key, line))
        self.lines = [*lines, *removed]
        self.processes = min(processes, len(self.queue))
        self.concurrency = concurrency
        self.workers: list[_Process] = []
        self.progress = progress
        self.steps = 0
        self.restarts = 0
        self.by_workers = 0
        self.started = time.monotonic()
        self.last_progress = 0.0
        self.interrupted = False
        self.stopping = False
        self.forced = False  # a second Ctrl-C killed the workers mid-drain
        self._held_at_stop: set[int] = set()

    # -- the loop ----------------------------------------------------------------

    def run(self) -> list[BatchRun]:
        try:
            self._loop()
        except KeyboardInterrupt:
            self.interrupted = True
            self._stop()
            raise BatchInterrupted(self.report(self._entries())) from None
        finally:
            for w in self.workers:
                w.kill()
        return self._entries()

    def _loop(self) -> None:
        self._show(force=True)
        while self.queue or any(w.held for w in self.workers):
            self._dispatch()
            ready = wait([w.conn for w in self.workers], timeout=PROGRESS_EVERY)
            for conn in ready:
                worker = next(w for w in self.workers if w.conn is conn)
                self._drain(worker)
            self._show()
        self._show(force=True)

    def _dispatch(self) -> None:
        while self.queue and len(self.workers) < self.processes:
            self.workers.append(_Process(self.settings))
        open_ = list(self.workers)
        while self.queue and open_:
            w = min(open_, key=lambda w: len(w.held))  # one at a time: a small batch spreads too
            if len(w.held) >= self.concurrency:
                break
            item = self.queue.popleft()
            line = item.line
            try:
                w.conn.send(("run", item.key, line.line, line.run_id, line.goal, line.inputs, line.own_id))
            except OSError:  # it died; the next wait() sees it
                self.queue.appendleft(item)
                open_.remove(w)
                continue
            w.held[item.key] = item

    def _drain(self, worker: _Process) -> None:
        try:
            while worker.conn.poll():
                self._message(worker, worker.conn.recv())
        except (EOFError, OSError):
            self._died(worker)

    def _message(self, worker: _Process, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "steps":
            self.steps += message[1]
        elif kind == "done":
            key, entry, foreign = message[1], message[2], message[3]
            worker.held.pop(key, None)
            self.results[key] = entry
            self.by_workers += 1
            if foreign:
                self.foreign.add(entry.run_id)
        elif kind == "outage":
            worker.outage = message[1]
        elif kind == "fatal":
            raise TargetError(self.target, f"a worker process could not load it: {message[1]}")

    def _died(self, worker: _Process) -> None:
        worker.kill()
        self.workers.remove(worker)
        code = worker.popen.returncode
        how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit {code}"
        for item in sorted(worker.held.values(), key=lambda i: i.key, reverse=True):
            item.deaths += 1
            if item.deaths >= MAX_DEATHS:
                line = item.line
                self.results[item.key] = BatchRun(
                    line.run_id, line.line, "failed", 0,
                    f"its worker process died {item.deaths} times while running it (last: {how}); "
                    "it stays resumable: run the batch again", "none",
                )
            else:
                self.queue.appendleft(item)
        self.restarts += 1

    def _stop(self) -> None:
        """Ctrl-C: ask every worker to cancel its runs and wait until they have.

        A run cancelled inside a synchronous tool may wait for the tool's
        thread to end so its outcome is recorded, as `polyloop run` does; a
        second Ctrl-C stops waiting, and the workers are killed (a crash: an
        action in progress is then an unknown execution).
        """
        self.stopping = True
        self._held_at_stop = {key for w in self.workers for key in w.held}
        for w in self.workers:
            try:
                w.conn.send(("stop",))
            except OSError:
                pass
        alive = list(self.workers)
        try:
            while alive:
                self._show(force=True)
                for conn in wait([w.conn for w in alive], timeout=0.5):
                    w = next(x for x in alive if x.conn is conn)
                    try:
                        while w.conn.poll():
                            self._message(w, w.conn.recv())
                    except Exception:  # gone, or a message cut by the first Ctrl-C
                        alive.remove(w)
        except KeyboardInterrupt:  # the second Ctrl-C: stop waiting (the workers are killed)
            self.forced = True

    # -- reporting -------------------------------------------------------------

    def _show(self, force: bool = False) -> None:
        if self.progress is None:
            return
        now = time.monotonic()
        if not force and now - self.last_progress < PROGRESS_EVERY:
            return
        self.last_progress = now
        self.progress(
            BatchProgress(
                total=self.total,
                counts=count(self.results.values()),
                running=sum(len(w.held) for w in self.workers),
                queued=len(self.queue),
                steps=self.steps,
                seconds=now - self.started,
                restarts=self.restarts,
                done_by_workers=self.by_workers,
                stopping=self.stopping,
                outage=next((w.outage for w in self.workers if w.outage), None),
            )
        )

    def _entries(self) -> list[BatchRun]:
        out = []
        for key, line in enumerate(self.lines):
            entry = self.results.get(key)
            if entry is None:
                why = (
                    "its worker was killed by a second Ctrl-C: an action it was running may now "
                    "need an operator; run the batch again to see"
                    if self.forced and key in self._held_at_stop
                    else "interrupted before it finished; it stays resumable: run the batch again"
                )
                entry = BatchRun(line.run_id, line.line, "interrupted", 0, why, "none")
            out.append(entry)
        return sorted(out, key=lambda r: r.line)

    def report(self, runs: list[BatchRun]) -> BatchReport:
        return BatchReport(
            name=self.name,
            target=self.target,
            directory=str(self.directory),
            runs=tuple(runs),
            steps=self.steps,
            seconds=time.monotonic() - self.started,
            processes=self.processes,
            concurrency=self.concurrency,
            restarts=self.restarts,
            interrupted=self.interrupted,
            killed=self.forced,
        )
