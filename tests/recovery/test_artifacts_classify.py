"""The walker's rules for `artifact` records (log format 1.2): 25 refused before 1.2, 26 names an
open action, 27 a safe name and the derived path."""

from __future__ import annotations

import pytest

from polyloop import RecordError, decode_record
from polyloop._recovery.walker import walk
from polyloop._log.ids import idempotency_key
from polyloop._log.records import (
    Artifact,
    GuardCheck,
    Intent,
    ModelCallResult,
    Resolution,
    RunFinished,
    RunStarted,
    StepCompleted,
)

SHA = "ab" * 32
TOOLS = [{"name": "extract", "replay": "never"}, {"name": "check", "replay": "never",
         "guards": {"precondition": True, "verify": False, "reconcile": False, "irreversible": False,
                    "rollback": None}}]


def started(version: str = "1.2") -> RunStarted:
    return RunStarted(run_id="r", goal="g", schema_version=version, config={"max_steps": 5, "tools": TOOLS})


def step(n: int, tool: str = "extract") -> list:
    return [
        Intent(kind="model_call", step=n, attempt=1, result_id=f"s{n}-m1"),
        ModelCallResult(result_id=f"s{n}-m1", output={"text": None, "tool_call": {"name": tool, "args": {}}}),
        Intent(kind="action", step=n, attempt=1, result_id=f"s{n}-a1", tool=tool, args={}, replay="never",
               idempotency_key=idempotency_key("r", n, tool, {})),
    ]


def ref(rid: str = "s1-a1", name: str = "x.json", path: str | None = None) -> Artifact:
    return Artifact(result_id=rid, name=name, path=path if path is not None else f"r.artifacts/{name}",
                    size=3, sha256=SHA)


def done(n: int) -> StepCompleted:
    return StepCompleted(step=n, result_id=f"s{n}-a1", observation="ok")


CASES = {
    "written by the open action": ([started(), *step(1), ref()], None),
    "several, and a later write of a name supersedes": (
        [started(), *step(1), ref(), ref(name="y"), done(1), *step(2), ref("s2-a1")], None),
    "in a 1.1 log": ([started("1.1"), *step(1), ref()], 25),
    "in a 1.0 log": ([started("1.0"), *step(1), ref()], 25),
    "naming a model call": ([started(), *step(1), ref("s1-m1")], 26),
    "naming no intent": ([started(), *step(1), ref("s1-a2")], 26),
    "naming an action of a completed step": ([started(), *step(1), done(1), ref()], 26),
    "naming an action with its result": (
        [started(), *step(1)[:2], *step(1)[2:], done(1), *step(2), ref("s1-a1")], 26),
    "naming an action an operator settled": (
        [started(), *step(1), Resolution(result_id="s1-a1", outcome="executed", observation="o"), ref()], 26),
    "naming an action whose precondition failed": (
        [started(), *step(1, "check"), GuardCheck(result_id="s1-a1", guard="precondition", passed=False), ref()],
        26),
    "with an unsafe name": ([started(), *step(1), ref(name="../x", path="r.artifacts/../x")], 27),
    "with a hidden name": ([started(), *step(1), ref(name=".x")], 27),
    "with another path": ([started(), *step(1), ref(path="elsewhere/x.json")], 27),
    "after run_finished": (
        [started(), Intent(kind="model_call", step=1, attempt=1, result_id="s1-m1"),
         ModelCallResult(result_id="s1-m1", output=None, error="x"),
         RunFinished(reason="error", result=None, steps=0), ref("s1-m1")], 2),
}


@pytest.mark.parametrize("records, rule", CASES.values(), ids=CASES.keys())
def test_artifact_rules(records, rule):
    w = walk(records, run_id="r")
    if rule is None:
        assert w.problems == []
    else:
        assert [p.rule for p in w.problems] == [rule], w.problems


def test_the_latest_reference_per_name_is_kept_in_order_of_latest_write():
    records = [started(), *step(1), ref(name="a"), ref(name="b"), ref(name="a")]
    w = walk(records, run_id="r")
    assert list(w.artifacts) == ["b", "a"]


def test_a_superseding_write_of_the_same_name_keeps_the_newer_reference():
    newer = Artifact(result_id="s1-a1", name="a", path="r.artifacts/a", size=9, sha256="cd" * 32)
    w = walk([started(), *step(1), ref(name="a"), newer], run_id="r")
    assert w.artifacts["a"] is newer


@pytest.mark.parametrize("field, value, why", [
    ("size", -1, "must not be negative"),
    ("sha256", "AB" * 32, "64 lowercase hex"),
    ("sha256", "ab", "64 lowercase hex"),
    ("size", True, "wrong type"),
    ("name", None, "must not be null"),
])
def test_decoding_refuses_a_malformed_artifact(field, value, why):
    obj = {"record": "artifact", "result_id": "s1-a1", "name": "x", "path": "r.artifacts/x", "size": 3,
           "sha256": SHA, "at": "2026-12-01T00:00:00.000000Z", field: value}
    with pytest.raises(RecordError, match=why):
        decode_record(obj)
