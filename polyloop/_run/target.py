"""Agent targets: `path/to/file.py:name` or `module.path:name`, and running them."""

from __future__ import annotations

import asyncio
import importlib
import importlib.machinery
import importlib.util
import inspect
import sys
from copy import copy as copy_of
from pathlib import Path
from collections.abc import Callable, Mapping
from typing import Any

from .agent import Agent
from .artifacts import check_artifacts
from .._log.errors import NeedsOperatorError, PolyLoopError, TargetError
from .._files import NotRegularFileError, check_regular, read_regular
from .._log.ids import check_run_id
from .hold import walked
from .loop import _Run
from .sources import run_on
from .._recovery.plan import Finished, NeedsOperator, plan
from .cancelling import ended_by
from .result import RunResult
from .resume import Resume
from .steps import RunEnded, resume_as
from .._log.store_port import Store


def _split(target: str) -> tuple[str, str]:
    where, sep, name = target.rpartition(":")
    if not sep or not where or not name:
        raise TargetError(target, "expected `path/to/file.py:name` or `module.path:name`")
    return where, name


def _is_file(where: str) -> bool:
    return where.endswith(".py") or "/" in where or "\\" in where


def canonical_target(target: str) -> str:
    """The target with a file path made absolute, so resume works from any directory."""
    where, name = _split(target)
    if _is_file(where):
        return f"{Path(where).resolve()}:{name}"
    return target


def load_target(target: str) -> Agent:
    """Import `target` and return the `Agent` it names.

    The name may be an `Agent` or a zero-argument callable returning one.

    Raises:
        TargetError: the file or module cannot be imported, the name is
            missing, or it is not an agent.
    """
    where, name = _split(target)
    module = _import_file(target, where) if _is_file(where) else _import_module(target, where)
    try:
        obj: Any = getattr(module, name)
    except AttributeError:
        raise TargetError(target, f"{where} has no attribute {name!r}") from None
    if not isinstance(obj, Agent) and callable(obj):
        try:
            obj = obj()
        except PolyLoopError:
            raise
        except (Exception, SystemExit) as exc:  # a target never picks polyloop's exit code
            raise TargetError(target, f"calling {name}() raised {_raised(exc)}") from exc
        if inspect.isawaitable(obj):
            if inspect.iscoroutine(obj):
                obj.close()  # never awaited, on purpose: no warning about it
            raise TargetError(
                target, f"{name} is an async function; make it a plain function that returns an Agent"
            )
    if not isinstance(obj, Agent):
        raise TargetError(target, f"{name} is a {type(obj).__name__}, not a polyloop.Agent")
    return obj


class _RegularFileLoader(importlib.machinery.SourceFileLoader):
    """Python's source loader, reading only regular files: a FIFO is refused, never waited on."""

    def get_data(self, path: str) -> bytes:
        return read_regular(path)


def _import_file(target: str, where: str) -> Any:
    path = Path(where).resolve()
    try:
        check_regular(path)
    except NotRegularFileError as exc:
        raise TargetError(target, f"{where} is {exc.kind}, not a regular file") from None
    except OSError:
        raise TargetError(target, f"no file {where}{_demo_hint(path, target)}") from None
    module_name = f"_polyloop_target_{abs(hash(str(path))):x}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(
        module_name, path, loader=_RegularFileLoader(module_name, str(path))
    )
    if spec is None or spec.loader is None:
        raise TargetError(target, f"{where} is not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    # Let the file import its siblings, as `python file.py` would.
    sys.path.insert(0, str(path.parent))
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:
        del sys.modules[module_name]
        raise TargetError(target, f"importing {where} raised {_raised(exc)}") from exc
    return module


DEMO_TARGET = "polyloop.examples.demo:agent"


def _demo_hint(path: Path, target: str) -> str:
    """Where the demo is when the repository's `examples/demo.py` is not here (an installed PolyLoop)."""
    if (path.parent.name, path.name) != ("examples", "demo.py"):
        return ""
    name = target.rpartition(":")[2]
    instead = DEMO_TARGET if name == "agent" else f"polyloop.examples.demo:{name}"
    return (f" (the demo ships with PolyLoop: run `polyloop demo`, or use the target {instead}; "
            "examples/ is in the source repository only)")


def _import_module(target: str, where: str) -> Any:
    try:
        return importlib.import_module(where)
    except (Exception, SystemExit) as exc:
        raise TargetError(target, f"importing {where} raised {_raised(exc)}") from exc


def _raised(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"SystemExit (it called sys.exit({exc.code!r}))"
    return f"{type(exc).__name__}: {exc}"


async def run_target(
    target: str,
    *,
    goal: str,
    store: Store,
    run_id: str | None = None,
    max_steps: int | None = None,
    agent: Agent | None = None,
    inputs: Mapping[str, Any] | None = None,
    on_alert: Callable[[dict[str, Any]], Any] | None = None,
) -> RunResult:
    """Start a new run of the agent at `target`, recording the target for resume.

    Args:
        target: `path/to/file.py:name` or `module.path:name`.
        goal: what the run is for.
        store: where the log goes.
        run_id: a safe file name; generated when omitted.
        max_steps: the step budget (default: the agent's).
        agent: the agent `load_target(target)` already returned, so a factory
            target is not called twice.
        inputs: what the run depends on, `{name: path or bytes}` (see `Agent.run`).
        on_alert: also told of every alert this run raises, after the
            agent's own `on_alert` is (the same dict; see `Agent`), e.g. to
            show it to a person; the log is not read again for it.

    Raises:
        RunExistsError: the run id already has a log (use `resume_run`).
        TargetError: the target cannot be loaded.
        and everything `Agent.run` raises.
    """
    if agent is None:
        agent = load_target(target)
    return await watched(agent, on_alert).run(
        goal,
        run_id=run_id,
        store=store,
        target=canonical_target(target),
        max_steps=max_steps,
        new=True,
        inputs=inputs,
    )


async def resume_run(
    run_id: str,
    *,
    store: Store,
    on_resume: Callable[[str], None] | None = None,
    inputs: Mapping[str, Any] | None = None,
    accept_changes: bool = False,
    accept_crash_loop: bool = False,
    reason: str | None = None,
    by: str | None = None,
    on_alert: Callable[[dict[str, Any]], Any] | None = None,
) -> RunResult:
    """Continue a run, re-importing the agent target recorded when it started.

    The single call behind `polyloop resume`: it takes the run's hold, reads
    and classifies the log once, and carries on from that verdict. A finished
    run is returned as recorded (`already_finished=True`), and a run that
    needs an operator is reported, without importing the target or writing
    anything. Before the run goes on, its checkpoint is compared with the
    agent now (inputs, logic version, configuration; log format 1.2) and its
    crash-loop budget honoured, as `Agent.run` does for a known run id.

    Args:
        run_id: the run.
        store: where it lives.
        on_resume: called with one sentence (what happens next) just before
            the run continues, e.g. to tell a person.
        inputs: the run's inputs now (`{name: path or bytes}`); default:
            re-read each recorded input from its recorded path.
        accept_changes: accept the checkpoint's differences on the record
            (`checkpoint_accepted`) instead of refusing; needs `reason`.
        accept_crash_loop: lift a crash-loop stop on the record
            (`crash_loop_accepted`); needs `reason`.
        reason: why (written with an acceptance).
        by: who accepts (and who resumed); default `user@host`.
        on_alert: also told of every alert this resume raises or finds
            unsettled, as `run_target`'s.

    Raises:
        RunNotFoundError: the run id has no log.
        RunActiveError: another live process holds the run.
        CorruptLogError: the log cannot come from a correct writer.
        NeedsOperatorError: an unknown `never` action must be settled first.
        TargetError: no target was recorded, or it cannot be loaded.
        CheckpointError: an input, the logic version, the configuration or a
            product the run referenced changed (nothing was written; products
            are checked before the target is imported); accept with `accept_changes`.
        CrashLoopError: the crash-loop budget is spent (nothing was written).
        and everything `Agent.run` raises.
    """
    check_run_id(run_id)
    resume = Resume(inputs, accept_changes, accept_crash_loop, reason, by, on_resume)
    resume.check()
    async with walked(store, run_id) as walker:
        planned = plan(walker)
        if isinstance(planned, Finished) and walker.finished is not None:
            f = walker.finished
            return RunResult(run_id, f.reason, f.result, f.steps, ended_by(f), already_finished=True)
        if not resume.accept_changes:  # accepted changes are weighed by Resume.open
            await check_artifacts(store, walker)
        if isinstance(planned, NeedsOperator):
            raise NeedsOperatorError(run_id, planned.executions)
        assert walker.started is not None
        target = walker.started.target
        own_loop = walker.started.config.get("loop") == "own"
        if not target:
            raise TargetError(
                "<none>",
                f"run {run_id!r} was started from Python without a target; resume it by calling "
                + ("its loop's open_run" if own_loop else "Agent.run") + " with the same run id",
            )
        if not own_loop:
            agent = watched(load_target(target), on_alert)
            return await run_on(agent, _Run(agent, store, walker, resume))
        goal = walker.started.goal
    # A user's loop takes the hold itself (`polyloop.durable.open_run`), in its entry point.
    return await _call_entry(target, run_id, store, goal, resume)


async def _call_entry(target: str, run_id: str, store: Store, goal: str, resume: Resume) -> RunResult:
    """Resume a run of a user's loop: call its entry point `fn(run_id=..., store=..., goal=...)`."""
    where, name = _split(target)
    module = _import_file(target, where) if _is_file(where) else _import_module(target, where)
    fn = getattr(module, name, None)
    if not callable(fn):
        raise TargetError(target, f"{where} has no function {name!r}")
    try:
        inspect.signature(fn).bind(run_id=run_id, store=store, goal=goal)
    except TypeError:
        raise TargetError(target, f"{name}{_signature(fn)} cannot be called as {name}(run_id=..., store=..., goal=...),"
                                  " which is how resume calls a loop's entry point") from None
    except ValueError:
        pass  # no signature to read (a builtin): the call itself says
    with resume_as(run_id, resume):
        try:
            if inspect.iscoroutinefunction(fn):
                value = await fn(run_id=run_id, store=store, goal=goal)
            else:  # a synchronous loop runs in a thread; its open_run_sync works on this event loop
                value = await asyncio.to_thread(fn, run_id=run_id, store=store, goal=goal)
            if inspect.isawaitable(value):
                value = await value
        except RunEnded as ended:
            return ended.result
    if isinstance(value, RunResult):
        return value
    async with walked(store, run_id) as walker:
        f = walker.finished
        if f is None:
            raise TargetError(target, f"{name}() returned before run {run_id!r} finished")
        return RunResult(run_id, f.reason, f.result, f.steps, ended_by(f))


def _signature(fn: Any) -> str:
    try:
        return str(inspect.signature(fn))
    except (TypeError, ValueError):
        return ""


def watched(agent: Agent, on_alert: Callable[[dict[str, Any]], Any] | None) -> Agent:
    """`agent`, or a copy of it whose `on_alert` also tells `on_alert` (the agent itself is not changed)."""
    if on_alert is None:
        return agent
    own = agent.on_alert

    async def both(event: dict[str, Any]) -> None:
        on_alert(event)
        if own is not None:
            value = own(event)
            if inspect.isawaitable(value):
                await value

    copy = copy_of(agent)
    copy.on_alert = both
    return copy
