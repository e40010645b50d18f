"""PolyLoop's traces: scripted runs of the JSONL store, recorded with their side effects.

A *world* is what exists outside the disk: it holds the side effects the
tools performed and the model calls that were paid for, and, while a
session is being recorded, writes each of them into the trace as a mark
at the moment it happens. The same agents run in the recorded session and
in the recovery the checker drives on every crash state, where the world
starts from the marks that precede the crash point.

A recorded session can "crash" the way a killed process does (the page
cache keeps what was written): a tool raises `ProcessCrash`, a
`BaseException` the run loop does not catch, just before or just after
its side effect. What a *power* cut does on top of that is the explorer's
business.
"""

from __future__ import annotations

import asyncio
import errno
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from polyloop import (
    Agent,
    JsonlStore,
    NeedsOperatorError,
    RunResult,
    ScriptedModel,
    StoreError,
    ToolContext,
    TransientModelError,
    encode_record,
    inspect_run,
    mark_resolved,
    tool,
)

from .explore import Found
from .model import CrashState
from .recorder import RecordingDisk
from .trace import Trace

DURABLE = frozenset({
    "run_started", "intent", "run_finished", "resolution", "guard_check",
    "checkpoint_accepted", "resumed", "crash_loop_accepted",  # log format 1.2
})
GOAL = "survive a power cut"


class ProcessCrash(BaseException):
    """The recorded process dies here (not an `Exception`: the run loop must not catch it)."""


@dataclass
class World:
    """Side effects and paid model calls, and the recorder that marks them (None in recovery)."""

    marks: list[dict[str, Any]] = field(default_factory=list)
    disk: RecordingDisk | None = None
    session: str = "recovery"  # names the acknowledgements of this session
    crash: set[tuple[str, int, str]] = field(default_factory=set)  # (run_id, step, before|after)
    fail: dict[tuple[str, int], int] = field(default_factory=dict)  # (run_id, step) -> failures left

    def note(self, kind: str, **info: Any) -> dict[str, Any]:
        mark = {"kind": kind, **info}
        self.marks.append(mark)
        if self.disk is not None:
            self.disk.mark(kind, **info)
        return mark

    def effects(self, run_id: str) -> list[dict[str, Any]]:
        return [m for m in self.marks if m["kind"] == "effect" and m["run_id"] == run_id]


def _effect(world: World, name: str, replay: str, args: dict[str, Any], ctx: ToolContext) -> str:
    if (ctx.run_id, ctx.step, "before") in world.crash:
        world.crash.discard((ctx.run_id, ctx.step, "before"))
        raise ProcessCrash
    observation = f"{name} {args['name']} (attempt {ctx.attempt})"
    world.note(
        "effect", run_id=ctx.run_id, step=ctx.step, tool=name, replay=replay, name=args["name"],
        result_id=ctx.result_id, key=ctx.idempotency_key, observation=observation,
    )
    if (ctx.run_id, ctx.step, "after") in world.crash:
        world.crash.discard((ctx.run_id, ctx.step, "after"))
        raise ProcessCrash
    return observation


def make_agent(world: World, run: Run) -> Agent:
    """The scripted agent of every scenario: a `never` write and a `safe` read, acting on `world`."""

    @tool
    async def write(name: str, ctx: ToolContext) -> str:
        """Write a file (replay `never`)."""
        return _effect(world, "write", "never", {"name": name}, ctx)

    @tool(replay="safe")
    async def read(name: str, ctx: ToolContext) -> str:
        """Read a file (replay `safe`)."""
        return _effect(world, "read", "safe", {"name": name}, ctx)

    if run.run_id.startswith("guarded"):
        # A guarded write: the precondition and the read-back verification ask the world,
        # so their durable verdicts (guard_check) and the action's result sit in the trace.
        @write.precondition
        def _(args: dict[str, Any], ctx: ToolContext) -> bool:
            return True

        @write.verify
        def _(args: dict[str, Any], result: Any, ctx: ToolContext) -> bool | str:
            landed = any(e["key"] == ctx.idempotency_key for e in world.effects(ctx.run_id))
            return landed or "the write is not in the world"

    model = _PaidModel(world, run.run_id, run.script)
    return Agent(model=model, tools=[write, read], max_steps=10, retry_backoff=0)


class _PaidModel(ScriptedModel):
    """The scripted model; each call is paid (a mark) and may fail as the world says."""

    def __init__(self, world: World, run_id: str, script: Sequence[dict[str, Any]]) -> None:
        super().__init__(script)
        self.world = world
        self.run_id = run_id

    async def complete(self, messages, tools):  # type: ignore[no-untyped-def, override]
        step = sum(1 for m in messages if m.get("role") == "assistant") + 1
        self.world.note("paid", run_id=self.run_id, step=step)
        left = self.world.fail.get((self.run_id, step), 0)
        if left:
            self.world.fail[(self.run_id, step)] = left - 1
            raise TransientModelError("rate limited (scripted)")
        return await super().complete(messages, tools)


class AckingStore(JsonlStore):
    """The JSONL store, marking every write that returned to the run loop (an acknowledgement)."""

    def __init__(self, directory: Any, world: World, **kwargs: Any) -> None:
        super().__init__(directory, **kwargs)
        self.world = world

    def _ack(self, run_id: str, record: Any) -> None:
        line = encode_record(record).decode()
        self.world.note(
            "ack", run_id=run_id, session=self.world.session, record=record.TAG,
            durable=record.TAG in DURABLE, line=line,
        )

    async def write_run_started(self, record):  # type: ignore[no-untyped-def, override]
        await super().write_run_started(record)
        self._ack(record.run_id, record)

    async def write_intent(self, run_id, record):  # type: ignore[no-untyped-def, override]
        await super().write_intent(run_id, record)
        self._ack(run_id, record)

    async def write_intents(self, run_id, records):  # type: ignore[no-untyped-def, override]
        await super().write_intents(run_id, records)
        for record in records:
            self._ack(run_id, record)

    async def write_model_call_result(self, run_id, record):  # type: ignore[no-untyped-def, override]
        await super().write_model_call_result(run_id, record)
        self._ack(run_id, record)

    async def write_step_completed(self, run_id, record):  # type: ignore[no-untyped-def, override]
        await super().write_step_completed(run_id, record)
        self._ack(run_id, record)

    async def write_run_finished(self, run_id, record):  # type: ignore[no-untyped-def, override]
        await super().write_run_finished(run_id, record)
        self._ack(run_id, record)

    async def write_resolution(self, run_id, record):  # type: ignore[no-untyped-def, override]
        await super().write_resolution(run_id, record)
        self._ack(run_id, record)

    async def write_guard_check(self, run_id, record):  # type: ignore[no-untyped-def, override]
        await super().write_guard_check(run_id, record)
        self._ack(run_id, record)

    async def write_action_result(self, run_id, record):  # type: ignore[no-untyped-def, override]
        await super().write_action_result(run_id, record)
        self._ack(run_id, record)

    async def write_checkpoint_accepted(self, run_id, record):  # type: ignore[no-untyped-def, override]
        await super().write_checkpoint_accepted(run_id, record)
        self._ack(run_id, record)

    async def write_resumed(self, run_id, record):  # type: ignore[no-untyped-def, override]
        await super().write_resumed(run_id, record)
        self._ack(run_id, record)

    async def write_crash_loop_accepted(self, run_id, record):  # type: ignore[no-untyped-def, override]
        await super().write_crash_loop_accepted(run_id, record)
        self._ack(run_id, record)


@dataclass(frozen=True)
class Run:
    """One run of a scenario: its id, the model's script and the answer it must end with."""

    run_id: str
    script: tuple[dict[str, Any], ...]

    @property
    def final(self) -> str:
        return str(self.script[-1]["final"])

    def calls(self, tool_name: str) -> list[tuple[int, str]]:
        """(step, argument `name`) of every scripted call of `tool_name`, one per call."""
        found = []
        for n, out in enumerate(self.script, start=1):
            for call in out.get("calls") or ([out] if "tool" in out else []):
                if call["tool"] == tool_name:
                    found.append((n, call["args"]["name"]))
        return found


@dataclass(frozen=True)
class Scenario:
    """Runs recorded in one session, and how that session goes wrong (as a killed process would).

    Attributes:
        name: the trace's label.
        runs: the runs, driven concurrently in one directory.
        fresh_directory: the store creates the run directory itself (else it exists, synced).
        crash: (run_id, step, "before"|"after"): the process dies around that step's side effect.
        fail: (run_id, step) -> how many times the model call of that step fails first.
        faults: (call, n): the n-th `write` (half of it lands) or `fsync` of the session
            fails with an OSError, the run stops with `StoreError` and the process restarts.
    """

    name: str
    runs: tuple[Run, ...]
    fresh_directory: bool = False
    crash: frozenset[tuple[str, int, str]] = frozenset()
    fail: tuple[tuple[tuple[str, int], int], ...] = ()
    faults: frozenset[tuple[str, int]] = frozenset()


def _script(*steps: str) -> tuple[dict[str, Any], ...]:
    out: list[dict[str, Any]] = []
    for n, step in enumerate(steps, start=1):
        usage = {"input_tokens": 10 * n, "output_tokens": n}
        if step.startswith("final:"):
            out.append({"final": step[len("final:") :], "usage": usage})
        elif step.startswith("calls:"):  # several tool calls at once: "calls:write:w1+read:r2"
            calls = [c.partition(":") for c in step[len("calls:") :].split("+")]
            out.append({"calls": [{"tool": t, "args": {"name": a}} for t, _, a in calls], "usage": usage})
        else:
            tool_name, _, arg = step.partition(":")
            out.append({"tool": tool_name, "args": {"name": arg}, "usage": usage})
    return tuple(out)


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in [
        Scenario("plain", (Run("plain", _script("read:r1", "write:w2", "read:r3", "final:done")),)),
        # Every record kind: failed model attempts, an unknown tool (an error step), a `never`
        # action that died before its effect (settled not_executed, run again) and one that
        # died after it (settled executed), resolutions, the finish.
        Scenario(
            "kinds",
            (Run("kinds", _script("read:r1", "write:w2", "fly:f3", "write:w4", "read:r5", "final:all")),),
            crash=frozenset({("kinds", 2, "before"), ("kinds", 4, "after")}),
            fail=((("kinds", 1), 1), (("kinds", 5), 2)),
        ),
        # The creation of the run directory and of a run in it.
        Scenario("create", (Run("create", _script("write:w1", "final:made")),), fresh_directory=True),
        # A full disk half-way through a record, and an fsync that fails: the store takes the
        # append back with an unsynced truncate, the run stops and is resumed.
        Scenario(
            "faults",
            (Run("faults", _script("read:r1", "write:w2", "read:r3", "final:done")),),
            faults=frozenset({("write", 4), ("fsync", 5)}),
        ),
        # Guarded actions (log format 1.1): a precondition and a read-back verification on the
        # `never` write, so guard_check (durable) and action_result records are in the trace;
        # one write dies after its effect (settled from the world), one is clean.
        Scenario(
            "guarded",
            (Run("guarded", _script("read:r1", "write:w2", "write:w3", "final:checked")),),
            crash=frozenset({("guarded", 2, "after")}),
        ),
        # Steps of several tool calls (log format 1.2): the intents of a step in one durable
        # write, the calls' action_results as they come; one process dies after the first
        # effect of step 1 (the other calls of the step unknown or not yet run).
        Scenario(
            "parallel",
            (Run("parallel", _script("calls:write:w1+read:r2+write:w3", "calls:read:r4+write:w5",
                                     "final:parallel")),),
            crash=frozenset({("parallel", 1, "after")}),
        ),
        # Two runs appending to two files at once: their appends are not ordered with each other.
        Scenario(
            "pair",
            (
                Run("left", _script("write:a1", "read:a2", "final:left")),
                Run("right", _script("read:b1", "write:b2", "final:right")),
            ),
        ),
    ]
}


async def settle(world: World, store: JsonlStore, run_id: str) -> None:
    """The operator: settle each unknown `never` action from what the world shows."""
    report = await inspect_run(store, run_id)
    assert report.recovery is not None, report.reason
    for e in report.recovery.blocking:
        done = [m for m in world.effects(run_id) if m["result_id"] == e.result_id]
        observation = done[0]["observation"] if done else None
        await mark_resolved(
            store, run_id, e.result_id, executed=bool(done), observation=observation,
            reason="the world says so", by="powerloss",
        )


async def drive(
    world: World, store: JsonlStore, run: Run, *, limit: int = 8, faults: bool = False
) -> RunResult:
    """Run or resume `run` to its end, as a process that restarts and an operator would.

    With `faults`, a `StoreError` (a scripted disk fault) restarts the process too.
    """
    restart = (ProcessCrash, StoreError) if faults else (ProcessCrash,)
    for _ in range(limit):
        try:
            return await make_agent(world, run).run(GOAL, run_id=run.run_id, store=store)
        except restart:
            continue  # the process restarts; the page cache kept what it wrote
        except NeedsOperatorError:
            await settle(world, store, run.run_id)
    raise AssertionError(f"{run.run_id} did not finish in {limit} sessions")


async def record(
    scenario: Scenario,
    root: Path,
    *,
    label: str | None = None,
    world: Sequence[dict[str, Any]] = (),
    store_type: type[AckingStore] = AckingStore,
    disk_type: type[RecordingDisk] = RecordingDisk,
) -> Trace:
    """Record one session of `scenario` in `root` (whose contents become the trace's start).

    With `world` (the marks of an earlier session) the session is a recovery: nothing
    crashes or fails on purpose. `store_type` and `disk_type` let a test record a
    deliberately broken store, to show the checker catches it.
    """
    runs = root / "runs"
    if not scenario.fresh_directory and not world:
        runs.mkdir(parents=True, exist_ok=True)
    label = label or scenario.name
    if scenario.faults and not world:
        disk: RecordingDisk = FaultyDisk(root, scenario.faults, label=label)
    else:
        disk = disk_type(root, label=label, world=list(world))
    w = World(marks=list(world), disk=disk, session=label)
    if not world:
        w.crash, w.fail = set(scenario.crash), dict(scenario.fail)
    async with store_type(runs, w, _disk=disk) as store:
        faults = bool(scenario.faults and not world)
        await asyncio.gather(*(drive(w, store, run, faults=faults) for run in scenario.runs))
    return disk.trace


class FaultyDisk(RecordingDisk):
    """A recording disk on which chosen calls fail: half of a write lands, an fsync does nothing."""

    def __init__(self, root: Path, faults: frozenset[tuple[str, int]], **kwargs: Any) -> None:
        super().__init__(root, **kwargs)
        self.faults = faults
        self.calls = {"write": 0, "fsync": 0}

    def _fails(self, call: str) -> bool:
        self.calls[call] += 1
        return (call, self.calls[call]) in self.faults

    def write(self, fd: int, data: bytes) -> None:
        if self._fails("write"):
            super().write(fd, data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device (scripted)")
        super().write(fd, data)

    def fsync(self, fd: int) -> None:
        if self._fails("fsync"):
            raise OSError(errno.EIO, "Input/output error (scripted)")
        super().fsync(fd)


async def record_on(found: Found, scenario: Scenario, scratch: Path) -> Trace:
    """Record a recovery session that starts from a crash state: a crash during resume.

    The state is what the machine finds after the reboot (creators' temp
    files name a dead process); the new trace starts from it, with the
    marks before the first crash as its world.
    """
    after_reboot(found.state).materialise(str(scratch))
    label = f"{found.trace.label}+resume@{found.point}"
    return await record(scenario, scratch, label=label, world=found.trace.marks_before(found.point))


def torn(found: Found) -> bool:
    """Whether a log of the state ends in an unterminated segment (a torn tail, NUL or not)."""
    logs = (data for path, data in found.state.files.items() if path.endswith(".jsonl"))
    return any(data and not data.endswith(b"\n") for data in logs)


# A process id no process can have (above Linux's largest pid_max): the
# creator of a temp file left by the recorded session is dead after a reboot.
DEAD_PID = (1 << 22) + 1
_TEMP = re.compile(rf"(^|/)(\.[A-Za-z0-9._-]+\.){os.getpid()}(\.[0-9a-f]{{8}}\.tmp)$")


def after_reboot(state: CrashState) -> CrashState:
    """The state with this process's temp files renamed as if their creator were dead."""
    files = {_TEMP.sub(rf"\g<1>\g<2>{DEAD_PID}\g<3>", p): data for p, data in state.files.items()}
    return replace(state, files=files)
