"""Log format 1.3: `run_finished` of reason `cancelled`, with `by` and `why` (docs/reference/log-format.md).

The decoder checks the fields' values; the classifier accepts a cancellation wherever a run can
stop (an open step, an unknown, a request that waits) and nowhere else than last.
"""

from __future__ import annotations

import orjson
import pytest

from polyloop import (
    SCHEMA_VERSION,
    Intent,
    ModelCallResult,
    RecordError,
    RunFinished,
    RunStarted,
    StepCompleted,
    decode_record,
    encode_record,
)
from polyloop._log.ids import idempotency_key
from polyloop._recovery.walker import walk

START = RunStarted(run_id="r", goal="g", config={"max_steps": 5})
CALL = [
    Intent(kind="model_call", step=1, attempt=1, result_id="s1-m1"),
    ModelCallResult(result_id="s1-m1", output={"text": None, "tool_call": {"name": "pay", "args": {}}}),
]
ACTION = Intent(kind="action", step=1, attempt=1, result_id="s1-a1", tool="pay", args={}, replay="never",
                idempotency_key=idempotency_key("r", 1, "pay", {}, None))


def cancelled(steps: int = 0, **fields) -> RunFinished:
    return RunFinished(reason="cancelled", result=None, steps=steps, **({"by": "al", "why": "done"} | fields))


def test_the_library_writes_1_3_and_a_cancellation_round_trips() -> None:
    assert SCHEMA_VERSION >= "1.3"
    record = cancelled()
    line = orjson.loads(encode_record(record))
    assert (line["reason"], line["by"], line["why"]) == ("cancelled", "al", "done")
    assert decode_record(line) == record


def test_other_endings_are_written_as_before_without_by_or_why() -> None:
    line = orjson.loads(encode_record(RunFinished(reason="final_answer", result="x", steps=1)))
    assert "by" not in line and "why" not in line


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"reason": "cancelled", "why": "w"}, "needs by"),
        ({"reason": "cancelled", "by": "a"}, "needs why"),
        ({"reason": "cancelled", "by": " ", "why": "w"}, "needs by"),
        ({"reason": "final_answer", "by": "a", "why": "w"}, "belong to a cancelled run"),
        ({"reason": "stopped"}, "unknown"),
    ],
)
def test_values_a_correct_writer_never_writes_are_refused(fields: dict, message: str) -> None:
    line = {"record": "run_finished", "result": None, "steps": 0, "at": "2026-12-03T00:00:00.000000Z"} | fields
    with pytest.raises(RecordError, match=message):
        decode_record(line)


@pytest.mark.parametrize(
    "records",
    [
        pytest.param([START], id="before-anything"),
        pytest.param([START, *CALL], id="step-open-after-its-model-call"),
        pytest.param([START, *CALL, ACTION], id="an-unknown-action"),
        pytest.param([START, Intent(kind="model_call", step=1, attempt=1, result_id="s1-m1"),
                      ModelCallResult(result_id="s1-m1", output=None, error="ConnectError")], id="a-failed-call"),
    ],
)
def test_a_cancellation_is_accepted_wherever_a_run_can_stop(records: list) -> None:
    walker = walk([*records, cancelled()], run_id="r")
    assert walker.problems == [] and walker.finished is not None and walker.finished.reason == "cancelled"


def test_a_cancellation_counts_the_completed_steps_and_nothing_follows_it() -> None:
    step = [*CALL[:1], ModelCallResult(result_id="s1-m1", output={"text": "hi", "tool_call": None}),
            StepCompleted(step=1, result_id=None, observation=None)]
    assert walk([START, *step, cancelled(steps=0)], run_id="r").problems[0].rule == 12
    walker = walk([START, *step, cancelled(steps=1), *CALL], run_id="r")
    assert walker.problems and walker.problems[0].rule == 2


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_a_cancellation_appended_to_an_older_log_reads(version: str) -> None:
    start = RunStarted(run_id="r", goal="g", config={"max_steps": 5}, schema_version=version)
    walker = walk([start, *CALL, cancelled()], run_id="r")
    assert walker.problems == [] and walker.minor == int(version[-1])
