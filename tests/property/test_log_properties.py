"""Property tests of the recovery classifier and the JSONL reader, with Hypothesis.

* Every log a correct writer can leave (any prefix of any run, through
  every path of the loop) classifies without error, as the independent
  oracle says.
* A log cut at any byte is a torn tail at worst, never corruption, and
  classifies as the records that survived whole.
* A middle line mutated into something no writer produces is reported as
  corruption — by the reader, by `classify`, by `verify` — never as a clean log.
* Whatever decodable records come in, in whatever order, the classifier
  returns a verdict or raises `CorruptLogError`, nothing else.

`POLYLOOP_HYPOTHESIS_EXAMPLES` scales the number of examples (default 150).
"""

from __future__ import annotations

import os
import random

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import logkit
from polyloop import CorruptLogError, Recovery, check, classify, verify_file
from polyloop._log.decode import decode
from polyloop._log.records import RecordError, encode
from polyloop.stores._jsonl import parse_log

EXAMPLES = int(os.environ.get("POLYLOOP_HYPOTHESIS_EXAMPLES") or 150)
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def _verdict(recovery: Recovery) -> logkit.Expected:
    return logkit.Expected(
        status=recovery.status,
        states={e.result_id: e.state for e in recovery.executions},
        blocking=[e.result_id for e in recovery.blocking],
        completed_steps=recovery.completed_steps,
    )


@SETTINGS
@given(records=logkit.logs())
def test_every_log_a_writer_can_leave_classifies_as_the_oracle_says(records, reliability):
    reliability.add("property.valid_logs")
    data = logkit.to_bytes(records)
    parsed = parse_log(data)
    assert not parsed.problems and parsed.torn_line is None
    assert parsed.records == records  # what is written is what is read
    recovery = classify(parsed.records, run_id=records[0].run_id)
    assert _verdict(recovery) == logkit.oracle(records)
    assert recovery.next_action()


@SETTINGS
@given(records=logkit.runs(), data=st.data())
def test_a_log_cut_at_any_byte_is_a_torn_tail_never_corruption(records, data, reliability, tmp_path_factory):
    reliability.add("property.truncations")
    raw = logkit.to_bytes(records)
    cut = data.draw(st.integers(1, len(raw)))
    parsed = parse_log(raw[:cut])
    assert not parsed.problems
    lines = [encode(r) for r in records]
    ends = [sum(len(x) for x in lines[: k + 1]) for k in range(len(lines))]
    # A record counts once its newline is there: written in one write with its
    # newline, a record without it was never acknowledged (a torn tail).
    whole = sum(1 for end in ends if end <= cut)
    assert parsed.records == records[:whole]
    assert (parsed.torn_line is None) == (cut in ends)
    if whole:
        recovery = classify(parsed.records, run_id=records[0].run_id)
        assert _verdict(recovery) == logkit.oracle(records[:whole])


@pytest.mark.parametrize("kind", logkit.MUTATIONS)
@settings(SETTINGS, max_examples=max(10, EXAMPLES // 2))
@given(records=logkit.runs(), seed=st.integers(0, 2**32))
def test_a_middle_line_no_writer_produces_is_corruption(kind, records, seed, reliability, tmp_path_factory):
    lines = [encode(r) for r in records]
    mutated = logkit.mutate(lines, kind, random.Random(seed))
    if mutated is None:
        return
    reliability.add("corrupt_files.made")
    reliability.add(f"corrupt_files.made.{kind}")
    data = b"".join(mutated)
    run_id = records[0].run_id
    parsed = parse_log(data)
    problems = list(parsed.problems)
    if not problems:
        _, problems = check(parsed.records, run_id=run_id)
    assert problems, f"{kind} went unnoticed:\n{data.decode(errors='replace')}"
    if not parsed.problems:
        with pytest.raises(CorruptLogError):
            classify(parsed.records, run_id=run_id)
    path = tmp_path_factory.mktemp("mut") / f"{run_id}.jsonl"
    path.write_bytes(data)
    assert verify_file(path).status == "corrupt"
    reliability.add("corrupt_files.detected")


_tags = st.sampled_from(["run_started", "intent", "model_call_result", "step_completed",
                         "run_finished", "resolution"])
_rids = st.sampled_from(["s1-m1", "s1-m2", "s1-a1", "s1-a2", "s2-m1", "s2-a1", "s3-m1", "x"])
_small = st.integers(-1, 4)
_tool_calls = st.none() | st.fixed_dictionaries(
    {"name": st.sampled_from(["read", "write", "t"]), "args": st.sampled_from([{}, {"name": "a"}])}
)
_raw_records = st.fixed_dictionaries(
    {"record": _tags, "at": st.just("2026-01-01T00:00:00.000000Z")},
    optional={
        "run_id": st.sampled_from(["r", "other"]),
        "goal": st.just("g"),
        "schema_version": st.sampled_from(["1.0", "1.7", "2.0", "x"]),
        "config": st.sampled_from([{}, {"max_steps": 2}, {"max_steps": True}, {"max_steps": "3"}]),
        "kind": st.sampled_from(["model_call", "action", "other"]),
        "step": _small,
        "steps": _small,
        "attempt": _small,
        "result_id": st.none() | _rids,
        "tool": st.sampled_from(["read", "write", "t"]),
        "args": st.sampled_from([{}, {"name": "a"}]),
        "replay": st.sampled_from(["safe", "never", "maybe"]),
        "idempotency_key": st.just("pl-k"),
        "output": st.none() | st.fixed_dictionaries({"text": st.none() | st.just("hi"), "tool_call": _tool_calls}),
        "usage": st.none() | st.sampled_from([{"input_tokens": 1, "output_tokens": 2}, {"input_tokens": "x"},
                                              {"input_tokens": None}, {}]),
        "error": st.none() | st.just("boom"),
        "observation": st.none() | st.just("ok"),
        "is_error": st.booleans(),
        "reason": st.sampled_from(["final_answer", "max_steps", "error", "other"]),
        "result": st.none() | st.just("done"),
        "outcome": st.sampled_from(["executed", "not_executed", "perhaps"]),
        "by": st.just("op"),
    },
)


def _decoded(objs: list[dict]) -> list:
    out = []
    for obj in objs:
        try:
            out.append(decode(obj))
        except RecordError:
            pass
    return out


@SETTINGS
@given(objs=st.lists(_raw_records, max_size=14), lead=st.booleans())
def test_the_classifier_answers_anything_with_a_verdict_or_a_corrupt_log_error(objs, lead, reliability):
    reliability.add("property.arbitrary_sequences")
    records = _decoded(objs)
    if lead:  # most sequences the classifier meets start right
        records.insert(0, decode({"record": "run_started", "run_id": "r", "goal": "g", "schema_version": "1.0",
                                  "config": {"max_steps": 3}, "at": "2026-01-01T00:00:00Z"}))
    recovery, problems = check(records, run_id="r")
    try:
        verdict = classify(records, run_id="r")
    except CorruptLogError as exc:
        assert problems and exc.problems and str(exc)
    else:
        assert not problems and isinstance(verdict, Recovery)
        assert verdict.next_action()


@SETTINGS
@given(objs=st.lists(_raw_records, min_size=1, max_size=10))
def test_the_reader_turns_any_json_lines_into_records_or_named_problems(objs, reliability):
    reliability.add("property.arbitrary_sequences")
    data = b"".join(orjson.dumps(o) + b"\n" for o in objs)
    parsed = parse_log(data)
    assert len(parsed.records) + len(parsed.problems) == len(objs)
    assert all(p.line is not None and p.message for p in parsed.problems)
