"""Records: one JSON object per line, `record` first, strict where it matters."""

from __future__ import annotations

import dataclasses

import orjson
import pytest

from polyloop import (
    SCHEMA_VERSION,
    Intent,
    ModelCallResult,
    Resolution,
    RunFinished,
    RunStarted,
    StepCompleted,
)
from polyloop._log.decode import decode
from polyloop._log.records import RECORD_TYPES, RecordError, UnknownSchemaError, encode

SAMPLES = [
    RunStarted(run_id="r", goal="g", target="m:a", config={"max_steps": 3}),
    Intent(kind="model_call", step=1, attempt=1, result_id="s1-m1"),
    Intent(kind="action", step=1, attempt=2, result_id="s1-a2", tool="t", args={"x": [1, "ü"]},
           replay="safe", idempotency_key="pl-k"),
    ModelCallResult(result_id="s1-m1", output={"text": "t", "tool_call": None}, usage={"input_tokens": 1, "output_tokens": 2}),
    ModelCallResult(result_id="s1-m2", output=None, error="RateLimitError: slow down"),
    ModelCallResult(result_id="s2-m1", output={"text": "t", "tool_call": None, "model": "gpt-4o-2024-08-06"}),
    StepCompleted(step=1, result_id="s1-a2", observation="ok", is_error=False),
    StepCompleted(step=2, result_id=None, observation=None),
    RunFinished(reason="final_answer", result="done", steps=2),
    Resolution(result_id="s1-a1", outcome="not_executed", by="op", reason="checked the bank"),
]


@pytest.mark.parametrize("record", SAMPLES, ids=lambda r: type(r).__name__)
def test_every_record_round_trips_as_one_json_line_tagged_first(record):
    line = encode(record)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    obj = orjson.loads(line)
    assert next(iter(obj)) == "record"
    assert obj["record"] == record.TAG
    assert decode(obj) == record



def _every_field_in_order(record, omit):
    """The line `encode` must write, built the plain way: a loop over the record's fields."""
    obj = {"record": record.TAG}
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        if value is not None or f.name not in omit:
            obj[f.name] = value
    return orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE)


_OPTIONAL_SET = [  # each record kind whose optional fields are left out when None, with them set
    Intent(kind="action", step=3, attempt=1, result_id="s3-c2-a1", tool="t", args={"call": None},
           replay="never", idempotency_key="pl-k", call=2),
    ModelCallResult(result_id="s1-m1", output=None, error="down", transient=True),
    StepCompleted(step=3, result_id=None, observation=None, calls=[{"result_id": "s3-c1-a1"}]),
    RunFinished(reason="cancelled", result=None, steps=2, by="ana", why="wrong input"),
    RunStarted(run_id="r", goal="g", trace="00-" + "1" * 32 + "-" + "2" * 16 + "-01"),
]


@pytest.mark.parametrize("record", SAMPLES + _OPTIONAL_SET, ids=lambda r: type(r).__name__)
def test_the_compiled_encoding_is_byte_for_byte_the_field_by_field_one(record):
    # `encode` builds each kind's dict with a function compiled once per kind (speed); the
    # log's bytes are a permanent contract: the same keys, in the same order, the same omissions.
    from polyloop._log.records import _OMIT_NONE

    assert encode(record) == _every_field_in_order(record, _OMIT_NONE.get(type(record), ()))


def test_encoding_what_is_not_a_record_is_a_type_error():
    with pytest.raises(TypeError, match="not a log record: dict"):
        encode({"record": "intent"})


def test_tags_are_the_spec_names_and_no_record_has_a_record_field():
    assert [cls.TAG for cls in RECORD_TYPES] == [
        "run_started", "intent", "model_call_result", "step_completed", "run_finished", "resolution",
        "guard_check", "action_result",  # log format 1.1
        "approval_request", "decision",  # log format 1.2
        "checkpoint_accepted", "resumed", "crash_loop_accepted",  # log format 1.2
        "artifact",  # log format 1.2
        "run_stopped",  # log format 1.3
    ]
    for cls in RECORD_TYPES:
        assert "record" not in {f.name for f in dataclasses.fields(cls)}


def test_records_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        SAMPLES[0].goal = "other"  # type: ignore[misc]


def test_unknown_fields_of_a_known_major_are_ignored():
    obj = orjson.loads(encode(SAMPLES[1]))
    obj["added_in_1_7"] = {"anything": True}
    assert decode(obj) == SAMPLES[1]
    started = orjson.loads(encode(SAMPLES[0]))
    started["schema_version"] = "1.9"
    assert decode(started).schema_version == "1.9"


@pytest.mark.parametrize("version", ["2.0", "0.1", "x", ""])
def test_an_unknown_major_version_fails_loudly(version):
    obj = orjson.loads(encode(SAMPLES[0]))
    obj["schema_version"] = version
    with pytest.raises(UnknownSchemaError):
        decode(obj)


def test_the_writer_stamps_the_current_schema():
    assert orjson.loads(encode(SAMPLES[0]))["schema_version"] == SCHEMA_VERSION == "1.4"


@pytest.mark.parametrize(
    "mutate, why",
    [
        (lambda o: o.update(record="intentz"), "unknown record kind"),
        (lambda o: o.pop("step"), "lacks field"),
        (lambda o: o.update(step=True), "wrong type"),
        (lambda o: o.update(step="1"), "wrong type"),
        (lambda o: o.update(step=0), "start at 1"),
        (lambda o: o.update(kind="shell"), "is not model_call, action or rollback"),
        (lambda o: o.update(tool="t"), "carries action fields"),
        (lambda o: o.update(result_id=None), "must not be null"),
    ],
    ids=["kind", "missing", "bool-as-int", "str-as-int", "zero-step", "bad-kind", "model-with-tool", "null-id"],
)
def test_decoding_is_strict(mutate, why):
    obj = orjson.loads(encode(SAMPLES[1]))
    mutate(obj)
    with pytest.raises(RecordError, match=why):
        decode(obj)


@pytest.mark.parametrize("value", [[], "x", 3, None])
def test_non_objects_are_not_records(value):
    with pytest.raises(RecordError):
        decode(value)


def test_action_intents_need_every_action_field():
    obj = orjson.loads(encode(SAMPLES[2]))
    obj["idempotency_key"] = None
    with pytest.raises(RecordError, match="lacks tool"):
        decode(obj)


def test_model_call_result_has_exactly_one_of_output_and_error():
    obj = orjson.loads(encode(SAMPLES[3]))
    obj["error"] = "boom"
    with pytest.raises(RecordError, match="exactly one"):
        decode(obj)


def test_pausing_the_collector_nests_and_restores_its_state():
    import gc

    from polyloop._log.gc_pause import paused_gc

    assert gc.isenabled()
    with paused_gc():
        with paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with paused_gc():
            pass
        assert not gc.isenabled()  # it was off before: it stays off
    finally:
        gc.enable()


@pytest.mark.parametrize("model", [3, "", ["gpt"], {"name": "gpt"}, True])
def test_the_answering_model_of_an_output_is_a_non_empty_string_when_there(model):
    obj = orjson.loads(encode(SAMPLES[3]))
    assert "model" not in obj["output"]  # optional (1.4): a log without it reads as before
    obj["output"]["model"] = model
    with pytest.raises(RecordError, match="output.model"):
        decode(obj)


@pytest.mark.parametrize(("ns", "stamp"), [
    (1_764_806_400_000_042_999, "2025-12-04T00:00:00.000042Z"),
    (1_764_806_400_999_999_999, "2025-12-04T00:00:00.999999Z"),
    (1_764_806_401_000_000_000, "2025-12-04T00:00:01.000000Z"),
    (1_764_806_459_123_456_000, "2025-12-04T00:00:59.123456Z"),
])
def test_a_record_is_stamped_in_utc_with_six_digits_of_microseconds(monkeypatch, ns, stamp):
    from polyloop._log import records

    monkeypatch.setattr(records._time, "time_ns", lambda: ns)
    assert records.utc_now() == stamp
    assert Intent(kind="model_call", step=1, attempt=1, result_id="s1-m1").at == stamp
