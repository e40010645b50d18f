"""A batch worker process: up to `concurrency` runs of one agent on its own event loop.

Started by `run_batch` as `python -m polyloop._fleet.worker FD PARENT_PID`,
where FD is its end of a socket pair. It receives the settings, then `run`
and `stop` messages; it sends `ready`, `steps` (completed steps, summed every
few tenths of a second), `done` (one `BatchRun` per run, and whether its run id
turned out to name another's run) and `fatal`.

It dies with its parent (SIGKILL on Linux, else when the socket closes): a
run whose process died holds no lock, so the next invocation resumes it by
the rules that follow any crash. It ignores SIGINT: on Ctrl-C the parent
sends `stop`, and the worker drains: every run finishes the model call or
action it is in (its outcome recorded) and stops before its next one, so no
action is cut off midway and each run stays resumable, none waits for a
person because of the stop. A run that never started stays unstarted.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import importlib
import os
import signal
import sys
import time
from multiprocessing.connection import Connection
from typing import Any

from .._log import commands
from .._trace.content import telemetry_by_env
from .._run.agent import Agent
from .._run.result import RunResult
from .plan import fresh_run_advice
from .report import BatchRun, Status
from .._log.errors import (
    CheckpointError,
    CorruptLogError,
    CrashLoopError,
    NeedsOperatorError,
    PolyLoopError,
    RunActiveError,
    RunMismatchError,
    RunNotFoundError,
)
from .._log.unavailable import ModelUnavailableError, unavailable_sentence
from .._operate.inspect import inspect_run
from .._run.retry import outages
from .._run.target import load_target
from .._run.cancelling import ended_by
from ..stores._jsonl import JsonlStore
from ..stores._url import store_kind

STEPS_EVERY = 0.2


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    fd, parent = int(args[0]), int(args[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent(parent)
    conn = Connection(fd)
    try:
        settings = conn.recv()
    except (EOFError, OSError):  # the parent died before it said what to run
        os._exit(1)
    sys.path[:] = settings["sys_path"]
    try:
        agent = load_target(settings["target"])
    except Exception as exc:  # the parent loaded it; say why this process could not
        conn.send(("fatal", f"{type(exc).__name__}: {exc}" if not isinstance(exc, PolyLoopError) else str(exc)))
        os._exit(2)
    commands.serve(settings.get("place", commands.DEFAULT))
    conn.send(("ready", os.getpid()))
    store, flush = _open_store(settings), None
    with contextlib.suppress(ImportError):  # `batch --otel`, or OTEL_* set: polyloop[otel] traces its runs
        if telemetry_by_env():
            store, flush = importlib.import_module("polyloop.otel").observe_from_env(store)
    worker = _Worker(conn, agent, store, settings["target"], settings["wait_active"])
    # Not asyncio.run: its shutdown waits for the threads of sync tools, and a stop
    # must not wait for them; whatever they were doing is, for the log, a crash like any other.
    loop = asyncio.new_event_loop()
    loop.run_until_complete(worker.serve())
    if flush is not None:
        flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _open_store(settings: dict[str, Any]) -> Any:
    """This process's own store: a directory, or a `PostgresStore` with a pool of its own.

    Its connections are opened on first use on the worker's event loop, and
    are enough for every run at a time plus a lease renewal.
    """
    where = settings["directory"]
    if store_kind(where) == "postgresql":
        from ..stores._postgres import PostgresStore  # the postgres extra: only for a database

        size = max(2, min(int(settings.get("concurrency") or 1) + 1, 10))
        return PostgresStore(where, lease=float(settings.get("lease") or 15.0), max_connections=size)
    return JsonlStore(where)


def _die_with_parent(parent: int) -> None:
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before the line above took effect
        os._exit(1)


class _Stopping(PolyLoopError):
    """The batch is stopping: the run stops before its next model or tool call (nothing of it started)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"run {run_id!r} stopped before its next call: the batch is stopping")


class _Foreign(Exception):
    """The line's run id names another's run (a log with another goal or target): the batch never ran it."""

    def __init__(self, entry: BatchRun) -> None:
        self.entry = entry


class _Counting:
    """The store, counting completed steps per run (progress is read off the log writes).

    Once `draining`, it refuses a new run's first record and every intent
    before it is written: what a run has started (a model call, an action)
    ends and is recorded, nothing new starts.
    """

    def __init__(self, store: Any) -> None:
        self._store = store
        self.steps: dict[str, int] = {}
        self.unsent = 0
        self.draining = False

    def _starting(self, run_id: str) -> None:
        if self.draining:
            raise _Stopping(run_id)

    async def write_run_started(self, record: Any) -> None:
        self._starting(record.run_id)
        await self._store.write_run_started(record)

    async def write_intent(self, run_id: str, record: Any) -> None:
        self._starting(run_id)
        await self._store.write_intent(run_id, record)

    async def write_intents(self, run_id: str, records: Any) -> None:
        self._starting(run_id)
        await self._store.write_intents(run_id, records)

    async def write_step_completed(self, run_id: str, record: Any) -> None:
        await self._store.write_step_completed(run_id, record)
        self.steps[run_id] = self.steps.get(run_id, 0) + 1
        self.unsent += 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class _Worker:
    def __init__(self, conn: Connection, agent: Agent, store: Any, target: str, wait_active: float) -> None:
        self.conn = conn
        self.agent = agent
        self.store = store
        self.counting = _Counting(store)
        self.target = target
        # A run held by another process is tried again for this long: the holder may
        # be the worker of a batch that was just killed, still letting go of its runs.
        self.wait_active = wait_active
        self.tasks: set[asyncio.Task[None]] = set()
        self.stopping: asyncio.Event
        self.orphaned = False  # the parent is gone: nobody waits for a drain

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        self.stopping = asyncio.Event()
        loop.add_reader(self.conn.fileno(), self._readable)
        ticker = asyncio.create_task(self._tick())
        try:
            await self.stopping.wait()
            if not self.orphaned:
                # Ctrl-C: let every run end the call it is in, then stop (see _Counting).
                self.counting.draining = True
                await asyncio.gather(*self.tasks, return_exceptions=True)
        finally:
            loop.remove_reader(self.conn.fileno())
            for task in (*self.tasks, ticker):
                task.cancel()
            await asyncio.gather(*self.tasks, ticker, return_exceptions=True)
            self._send_steps()

    def _readable(self) -> None:
        try:
            while self.conn.poll():
                message = self.conn.recv()
                if message[0] == "run":
                    task = asyncio.get_running_loop().create_task(self._one(*message[1:]))
                    self.tasks.add(task)
                    task.add_done_callback(self.tasks.discard)
                elif message[0] == "stop":
                    self.stopping.set()
                    return
        except (EOFError, OSError):  # the parent is gone
            self.orphaned = True
            self.stopping.set()

    def _send(self, message: tuple[Any, ...]) -> None:
        try:
            self.conn.send(message)
        except OSError:  # the parent is gone
            self.orphaned = True
            self.stopping.set()

    def _send_steps(self) -> None:
        if self.counting.unsent:
            n, self.counting.unsent = self.counting.unsent, 0
            self._send(("steps", n))

    async def _tick(self) -> None:
        said: str | None = None
        while True:
            await asyncio.sleep(STEPS_EVERY)
            self._send_steps()
            now = outages()  # the runs of this process that wait on a model endpoint, for the display
            text = now[0].sentence() if now else None
            if text != said:
                said = text
                self._send(("outage", text))

    async def _one(self, key: int, line: int, run_id: str, goal: str, inputs: Any, own_id: bool = False) -> None:
        deadline = time.monotonic() + self.wait_active
        pause = 0.05
        foreign = False
        while True:
            try:
                entry = await self._attempt(line, run_id, goal, inputs, own_id)
                break
            except _Foreign as exc:
                entry, foreign = exc.entry, True
                break
            except RunActiveError as exc:
                if time.monotonic() >= deadline:
                    entry = BatchRun(run_id, line, "active", 0, str(exc), "none")
                    break
                if self.counting.draining:
                    return  # not started: the parent reports it interrupted
                await asyncio.sleep(pause)
                pause = min(pause * 2, 1.0)
            except Exception as exc:  # e.g. the log cannot be read: this run fails, the batch goes on
                reason = str(exc) if isinstance(exc, PolyLoopError) else f"{type(exc).__name__}: {exc}"
                entry = BatchRun(run_id, line, "failed", 0, reason, "none")
                break
        self._send_steps()
        self._send(("done", key, entry, foreign))

    async def _attempt(self, line: int, run_id: str, goal: str, inputs: Any, own_id: bool) -> BatchRun:
        def entry(status: Status, reason: str, action: str, steps: int = 0, parked: Any = None) -> BatchRun:
            waiting, nxt = parked if parked is not None else ((), None)
            return BatchRun(run_id, line, status, steps, reason, action, tuple(waiting), nxt)

        def foreign(field: str, recorded: str | None = None) -> _Foreign:
            return _Foreign(entry("changed", _mismatch(run_id, field, own_id, recorded), "none", before))

        action = "started"
        before = 0
        try:
            report = await inspect_run(self.store, run_id)
        except RunNotFoundError:
            report = None
        if report is not None:
            # Read through the `inspect --json` document: that is the contract a
            # report keeps (docs/reference/json.md), whatever the classes behind it.
            action = "resumed"
            doc = report.to_json()
            status = doc["status"]
            if status == "corrupt":
                return entry("corrupt", doc["reason"], "none")
            if status == "active":
                raise RunActiveError(run_id, doc.get("holder"))
            before = int(doc.get("steps") or 0)
            if doc.get("goal") != goal:
                raise foreign("goal")
            if doc.get("target") != self.target:
                raise foreign("target", doc.get("target"))
            if status == "finished":
                ended = report.recovery.finished if report.recovery is not None else None
                error = ended_by(ended) if ended is not None else None
                result = RunResult(run_id, doc["reason"], doc.get("result"), before, error)
                return _finished(run_id, line, result, "skipped", own_id)
            if status == "needs_operator":
                why, *parked = _parked(doc)
                return entry("needs_operator", why, "skipped", before, parked)
        extra = {"inputs": inputs} if inputs is not None else {}
        try:
            result = await self.agent.run(
                goal, run_id=run_id, store=self.counting, target=self.target, **extra  # type: ignore[arg-type]
            )
        except _Stopping:
            steps = before + self.counting.steps.get(run_id, 0)
            why = "stopped before its next call (Ctrl-C); it stays resumable: run the batch again"
            return entry("interrupted", why, action, steps)
        except CrashLoopError as exc:
            _, *parked = _parked((await inspect_run(self.store, run_id)).to_json())
            return entry("needs_operator", str(exc), action, before, parked)
        except ModelUnavailableError as exc:  # stopped, resumable: the next invocation resumes it
            steps = before + self.counting.steps.get(run_id, 0)
            why = unavailable_sentence(exc.endpoint, exc.error, exc.failures, exc.since)
            return entry("unavailable", f"stopped, resumable: {why}; run the batch again to resume it", action, steps)
        except CheckpointError as exc:  # what the line's run depends on changed since it started
            return entry("changed", str(exc), "none", before)
        except NeedsOperatorError:
            # An unknown action, an alert, an approval or a question: the log,
            # read as `inspect --json` reads it, says what waits and how to settle it.
            doc = (await inspect_run(self.store, run_id)).to_json()
            steps = before + self.counting.steps.get(run_id, 0)
            why, *parked = _parked(doc)
            return entry("needs_operator", why, action, steps, parked)
        except CorruptLogError as exc:
            return entry("corrupt", str(exc), "none", before)
        except RunActiveError:
            raise
        except RunMismatchError as exc:
            if exc.field == "goal":  # its log appeared since the look above
                raise foreign("goal") from None
            why = (
                f"run {run_id} was started with {exc.field}={exc.recorded!r}, not {exc.given!r}: the agent "
                f"changed since; restore it, or {fresh_run_advice(own_id, recorded=True)}"
            )
            return entry("changed", why, "none", before)
        except PolyLoopError as exc:
            return entry("failed", str(exc), action, before + self.counting.steps.get(run_id, 0))
        except Exception as exc:  # a bug in the agent's code: this run fails, the batch goes on
            steps = before + self.counting.steps.get(run_id, 0)
            return entry("failed", f"{type(exc).__name__}: {exc}", action, steps)
        return _finished(run_id, line, result, action, own_id)


def _finished(run_id: str, line: int, result: RunResult, action: str, own_id: bool) -> BatchRun:
    # A run that ended stays ended: running the batch again reports it again.
    again = fresh_run_advice(own_id, recorded=True)
    over = f"; the run is over (an ended run is never resumed): to run the line again, {again}"
    if result.reason == "error":
        return BatchRun(run_id, line, "failed", result.steps, f"the run ended in an error: {result.error}{over}", action)
    if result.reason == "cancelled":  # a person ended it (`polyloop cancel`): over, and it says who and why
        return BatchRun(run_id, line, "finished", result.steps, f"{result.error}{over}", action)
    if result.reason == "tool_failures":  # exit code 1 for `polyloop run` too
        why = f"a tool spent its failure budget: {result.error}{over}"
        return BatchRun(run_id, line, "failed", result.steps, why, action)
    return BatchRun(run_id, line, "finished", result.steps, result.reason, action)


def _mismatch(run_id: str, field: str, own_id: bool, recorded: str | None = None) -> str:
    # Not "run the batch with that target": the batch's manifest holds its own target by now.
    fresh = fresh_run_advice(own_id, recorded=False)  # the manifest withdraws a run id of another's run
    if field == "goal":
        return (
            f"run {run_id} exists with another goal (the line changed since the run started, "
            f"or the id belongs to another run); restore the line, or {fresh}"
        )
    return f"run {run_id} was started by the agent target {recorded or '(none)'}, not this batch's; {fresh}"



def _parked(doc: dict[str, Any]) -> tuple[str, list[dict[str, Any]], str | None]:
    """Why a run waits for a person, what waits and inspect's `next`, from its `inspect --json` document."""
    waiting = _waiting_of(doc)
    why = doc["reason"] if any(w.get("kind") != "unknown" for w in waiting) else _unknown(waiting)
    return why, waiting, doc.get("next")


def _waiting_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """What a person must settle, from an `inspect --json` document."""
    if doc.get("waiting"):
        return [dict(w) for w in doc["waiting"]]
    return [  # documents without a `waiting` list: the open unknown `never` actions
        {"id": e["id"], "kind": "unknown", "tool": e.get("tool"), "args": e.get("args"),
         "reason": f"the outcome of {e.get('tool')} ({e['id']}, step {e.get('step')}) is unknown"}
        for e in doc.get("executions", ())
        if e.get("kind") == "action" and e.get("state") == "unknown" and e.get("replay") == "never"
        and "resolution" not in e
    ]


def _unknown(waiting: list[dict[str, Any]]) -> str:
    if any(commands.is_rollback_id(str(w.get("id"))) for w in waiting):  # a rollback in doubt: inspect's words name it as one
        return "; ".join(str(w.get("reason")) for w in waiting) + ": an operator must settle it"
    what = ", ".join(f"{w.get('tool')} ({w.get('id')})" for w in waiting) or "an action"
    return f"the outcome of {what} is unknown and its tool is not safe to replay: an operator must settle it"


if __name__ == "__main__":
    main()
