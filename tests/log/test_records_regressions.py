"""Regressions found by fuzzing the readers (tests/property/test_reader_fuzz.py)."""

from __future__ import annotations

import orjson
import pytest

from polyloop import CorruptLogError, JsonlStore, inspect_run, verify_file

LOG = [
    {"record": "run_started", "run_id": "r", "goal": "g", "schema_version": "1.0", "config": {}, "at": "t"},
    {"record": "intent", "kind": "model_call", "step": 1, "attempt": 1, "result_id": "s1-m1", "at": "t"},
]


def result(usage):
    return {"record": "model_call_result", "result_id": "s1-m1", "at": "t", "usage": usage,
            "output": {"text": "done", "tool_call": None}}


@pytest.mark.parametrize(
    "usage",
    [{"input_tokens": "many"}, {"input_tokens": None}, {"output_tokens": [1]}, {"input_tokens": True},
     {"output_tokens": 1.5}],
)
async def test_a_usage_that_is_not_token_counts_is_corruption_for_every_reader(tmp_path, usage):
    # It used to decode, and then `inspect` crashed with a TypeError or
    # ValueError in its token totals (and resume in ModelOutput.from_json).
    store = JsonlStore(tmp_path)
    store.path("r").write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in [*LOG, result(usage)]))
    with pytest.raises(CorruptLogError, match="usage"):
        await store.read_log("r")
    assert verify_file(store.path("r")).status == "corrupt"
    report = await inspect_run(store, "r")
    assert report.status == "corrupt" and "usage" in report.reason
    orjson.dumps(report.to_json())


async def test_token_counts_and_unknown_usage_fields_still_read(tmp_path):
    store = JsonlStore(tmp_path)
    usage = {"input_tokens": 3, "output_tokens": 4, "cached_tokens": "n/a"}
    store.path("r").write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in [*LOG, result(usage)]))
    (*_, last) = await store.read_log("r")
    assert last.usage == usage
    assert (await inspect_run(store, "r")).to_json()["tokens"]["input"] == 3
