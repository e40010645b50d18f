"""The checker: what must hold of PolyLoop's JSONL store in every crash state.

For one crash state (`explore.Found`) of a scenario's trace:

1. Materialise the tree in a scratch directory.
2. `polyloop verify` (`verify_logs`): no log is corrupt. A torn tail, a
   missing unsynced suffix, a tail of NUL bytes, a creation's temp file
   are what a correct writer plus a power cut produce — never corruption.
3. Per run, before any recovery (`inspect_run`): not corrupt; every record
   acknowledged as durable before the cut is there, in order, and so is
   everything written before it (prefix durability); every side effect
   the world saw has its intent in the log (intents are synced before
   effects, so a missing one is a silent loss); every paid model call has
   one.
4. Recover as a restarted process and an operator would (`scenarios.drive`:
   `Agent.run` resumes, or starts the run again when its log is gone, and
   unknown `never` actions are settled from the world with
   `mark_resolved`): the run must reach its scripted final answer (a run id
   is never stuck), every `never` action must have happened once (not twice, not never)
   in the world, every `safe` one at least once.
5. `verify` again: every log ok, no torn tail left.

A store author reuses steps 1, 2 and 5 as they are and writes 3 and 4 for
their own records (see README.md).
"""

from __future__ import annotations

import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from polyloop import Intent, JsonlStore, encode_record, inspect_run, verify_logs

from .explore import Found
from .scenarios import AckingStore, Run, Scenario, World, after_reboot, drive


def scratch_root() -> str:
    """Where states are materialised: memory-backed when the machine has /dev/shm."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() else tempfile.gettempdir()


async def check(found: Found, scenario: Scenario) -> list[str]:
    """Every violation in one crash state (empty when it holds up)."""
    marks = found.trace.marks_before(found.point)
    scratch = tempfile.mkdtemp(prefix="powerloss-", dir=scratch_root())
    try:
        root = Path(scratch)
        after_reboot(found.state).materialise(scratch)
        runs = root / "runs"
        problems = _corrupt_logs(runs, strict=False)
        async with JsonlStore(runs) as store:
            for run in scenario.runs:
                problems += await _before_recovery(store, run, marks)
        if problems:
            return problems  # recovering from a state already wrong proves nothing more
        world = World(marks=[dict(m) for m in marks])
        async with AckingStore(runs, world) as acking:
            for run in scenario.runs:
                problems += await _recover(world, acking, run)
        return problems + _corrupt_logs(runs, strict=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _corrupt_logs(runs: Path, *, strict: bool) -> list[str]:
    if not runs.is_dir():
        return []
    report = verify_logs(runs, workers=1)
    bad = {"corrupt", "torn_tail"} if strict else {"corrupt"}
    return [
        f"verify: {Path(f.path).name} is {f.status}: {f.problems}"
        for f in report.files
        if f.status in bad
    ]


async def _before_recovery(store: JsonlStore, run: Run, marks: list[dict[str, Any]]) -> list[str]:
    rid = run.run_id
    must = _acknowledged(marks, rid)
    effects = [m for m in marks if m["kind"] == "effect" and m["run_id"] == rid]
    paid = Counter(m["step"] for m in marks if m["kind"] == "paid" and m["run_id"] == rid)
    if not store.path(rid).exists():
        if any(must) or effects or paid:
            gone = "the log" if store.directory.is_dir() else f"the directory {store.directory.name}/"
            return [f"{rid}: {gone} is gone, though records were acknowledged durable"]
        return []
    report = await inspect_run(store, rid)
    if report.status == "corrupt":
        return [f"{rid}: inspect says corrupt: {report.reason}"]
    have = [orjson.loads(encode_record(r)) for r in report.records]
    problems = []
    missing = _missing(have, must)
    if missing is not None:
        problems.append(f"{rid}: acknowledged record {missing['record']} at {missing['at']} is missing")
    intents = [r for r in report.records if isinstance(r, Intent)]
    ids = {i.result_id for i in intents}
    problems += [
        f"{rid}: silently lost: the effect of {e['result_id']} has no intent in the log"
        for e in effects
        if e["result_id"] not in ids
    ]
    calls = Counter(i.step for i in intents if i.kind == "model_call")
    problems += [
        f"{rid}: {n} paid model calls of step {step}, {calls[step]} intents"
        for step, n in paid.items()
        if calls[step] < n
    ]
    return problems


def _acknowledged(marks: list[dict[str, Any]], run_id: str) -> list[list[dict[str, Any]]]:
    """Per session, the records acknowledged durable: all up to its last durable write."""
    sessions: dict[str, list[dict[str, Any]]] = {}
    for m in marks:
        if m["kind"] == "ack" and m["run_id"] == run_id:
            sessions.setdefault(m["session"], []).append(m)
    out = []
    for acks in sessions.values():
        last = max((i for i, a in enumerate(acks) if a["durable"]), default=-1)
        out.append([orjson.loads(a["line"]) for a in acks[: last + 1]])
    return out


def _missing(have: list[Any], must: list[list[dict[str, Any]]]) -> dict[str, Any] | None:
    """The first acknowledged record not found: the first session's as a prefix, later ones in order."""
    position = 0
    for n, records in enumerate(must):
        # Only the session that acknowledged the run's creation is a prefix of the log; a run
        # whose creation was durable but never acknowledged before the cut (killed between the
        # directory's fsync and the return) has its first acknowledgements in a later session.
        prefix = n == 0 and bool(records) and records[0].get("record") == "run_started"
        for record in records:
            if prefix:
                if position >= len(have) or have[position] != record:
                    return record
            else:
                try:
                    position = have.index(record, position)
                except ValueError:
                    return record
            position += 1
    return None


async def _recover(world: World, store: AckingStore, run: Run) -> list[str]:
    rid = run.run_id
    try:
        result = await drive(world, store, run)
    except Exception as exc:  # every failure is a finding, reported with the others
        return [f"{rid}: recovery failed: {type(exc).__name__}: {exc}"]
    problems = []
    if (result.reason, result.text) != ("final_answer", run.final):
        problems.append(f"{rid}: ended {result.reason} {result.text!r}, not {run.final!r}")
    effects = world.effects(rid)
    for step, name in run.calls("write"):
        n = sum(1 for e in effects if (e["step"], e["name"]) == (step, name))
        if n != 1:
            problems.append(f"{rid}: the `never` write {name} of step {step} happened {n} times")
    for step, name in run.calls("read"):
        if not any((e["step"], e["name"]) == (step, name) for e in effects):
            problems.append(f"{rid}: the `safe` read {name} of step {step} never happened")
    return problems
