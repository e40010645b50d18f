"""Power loss: every crash state the file-system model allows, checked against the JSONL store.

Each scenario (powerloss/scenarios.py) is run once on the real store through
a recording disk; the explorer (powerloss/explore.py) turns the trace into
the disk states a power cut after any operation could leave under the model
(powerloss/model.py); the checker (powerloss/check.py) materialises each
state and runs verify, inspect and a recovery on it. Crash states that have
a torn tail are then used as the start of a second, recorded recovery
session — the tail sealing and lock of resume, then a crash during it —
whose crash states are checked the same way.

By default a fast, seeded sample runs (a few hundred states). The full
exploration (at least 10,000 distinct states; a few minutes):

    POLYLOOP_POWERLOSS=full .venv/bin/python -m pytest tests/crash/test_powerloss.py -q -s

`POLYLOOP_POWERLOSS_PER_POINT=N` sets the states per crash point (60 in the
full run), `POLYLOOP_POWERLOSS_SEED` the seed of the sample.
"""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path

import pytest

from powerloss.check import check, scratch_root
from powerloss.explore import Found, Tally, explore
from powerloss.scenarios import SCENARIOS, record, record_on, torn

FULL = os.environ.get("POLYLOOP_POWERLOSS") == "full"
SEED = int(os.environ.get("POLYLOOP_POWERLOSS_SEED") or 16)
# Per crash point, the states enumerated (whole when there are no more than that).
PER_POINT = int(os.environ.get("POLYLOOP_POWERLOSS_PER_POINT") or (60 if FULL else 3))
# States checked per trace (None: all); the fast sample takes a seeded subset.
CHECKED = None if FULL else 60
RESUMES = 6 if FULL else 2  # crash states each scenario's recovery is recorded on
RESUME_PER_POINT = 20 if FULL else 2
RESUME_CHECKED = None if FULL else 25

TOTAL = Tally()


async def _check_all(found: list[Found], name: str, tally: Tally, limit: int | None) -> None:
    if limit is not None and len(found) > limit:
        found = random.Random(f"{SEED}:{name}").sample(found, limit)
    failures = []
    for f in found:
        problems = await check(f, SCENARIOS[name])
        if problems:
            files = sorted(f.state.files)
            failures.append(f"{f.trace.label} after op {f.point}: {problems}\n  files: {files}")
    tally.checked += len(found)
    if failures:
        head = f"{len(failures)} of {len(found)} states fail:\n"
        pytest.fail(head + "\n".join(failures[:10]), pytrace=False)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_every_crash_state_of_a_session_recovers(name: str, reliability) -> None:
    with tempfile.TemporaryDirectory(dir=scratch_root()) as root:
        trace = await record(SCENARIOS[name], Path(root))
    tally = Tally()
    found = list(explore(trace, per_point=PER_POINT, seed=SEED, tally=tally))
    await _check_all(found, name, tally, CHECKED)
    _report(name, tally, reliability)


@pytest.mark.parametrize("name", ["faults", "kinds", "pair", "plain"])
async def test_a_crash_during_resume_from_a_torn_state_recovers(name: str, reliability) -> None:
    with tempfile.TemporaryDirectory(dir=scratch_root()) as root:
        trace = await record(SCENARIOS[name], Path(root))
    bases = [f for f in explore(trace, per_point=PER_POINT, seed=SEED) if torn(f)]
    assert bases, "no crash state with a torn tail to resume from"
    bases = random.Random(f"{SEED}:{name}:bases").sample(bases, min(RESUMES, len(bases)))
    tally = Tally()
    for base in bases:
        with tempfile.TemporaryDirectory(dir=scratch_root()) as root:
            second = await record_on(base, SCENARIOS[name], Path(root))
        # Every torn log is cut by the first write resume makes to it (and a
        # log resume never writes to keeps its torn tail, which readers drop).
        torn_logs = {second.initial_inode(p) for p, data in second.files.items()
                     if p.endswith(".jsonl") and data and not data.endswith(b"\n")}
        for ino in torn_logs:
            ops = [op for op in second.ops if op.ino == ino and op.kind in ("truncate", "write")]
            assert not ops or ops[0].kind == "truncate", "resume wrote after a torn tail without cutting it"
        found = list(explore(second, per_point=RESUME_PER_POINT, seed=SEED, tally=tally))
        await _check_all(found, name, tally, RESUME_CHECKED)
    _report(f"{name}+resume", tally, reliability)


def _report(label: str, tally: Tally, reliability) -> None:
    TOTAL.add(tally)
    reliability.add("powerloss_states_checked", tally.checked)
    print(f"\npowerloss {label}: {tally}, 0 violations")
    print(f"powerloss in all so far: {TOTAL}")
