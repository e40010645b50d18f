"""Several tool calls in one model output: ModelOutput, its log form, ScriptedModel."""

from __future__ import annotations

import orjson
import pytest

from polyloop import ModelOutput, ScriptedModel, ToolCall, Usage

A = ToolCall("a", {"x": 1})
B = ToolCall("b", {})


def test_one_call_keeps_the_old_constructor_attribute_and_log_form() -> None:
    out = ModelOutput("thinking", A, Usage(3, 4))
    assert out.tool_call == A and out.tool_calls == (A,)
    assert out == ModelOutput(text="thinking", tool_calls=[A], usage=Usage(3, 4))
    assert orjson.dumps(out.to_json()) == b'{"text":"thinking","tool_call":{"name":"a","args":{"x":1}}}'
    final = ModelOutput(text="done")
    assert final.tool_call is None and final.tool_calls == ()
    assert orjson.dumps(final.to_json()) == b'{"text":"done","tool_call":null}'


def test_several_calls_add_a_tool_calls_list_and_repeat_the_first() -> None:
    out = ModelOutput(tool_calls=(A, B))
    assert out.tool_call == A
    assert out.to_json() == {
        "text": None,
        "tool_call": {"name": "a", "args": {"x": 1}},
        "tool_calls": [{"name": "a", "args": {"x": 1}}, {"name": "b", "args": {}}],
    }


@pytest.mark.parametrize(
    "out",
    [
        ModelOutput(text="t"),
        ModelOutput(tool_call=A),
        ModelOutput(text="t", tool_calls=(A, B, A), usage=Usage(1, 2)),
        ModelOutput(tool_calls=(B,), stop_reason="tool_use", usage=Usage(1, 2, 30, 40)),
    ],
    ids=["final", "one", "three", "stop-reason-and-cache"],
)
def test_from_json_reads_what_to_json_wrote(out: ModelOutput) -> None:
    usage = None if out.usage is None else out.usage.to_json()
    assert ModelOutput.from_json(orjson.loads(orjson.dumps(out.to_json())), usage) == out


def test_from_json_reads_the_old_form() -> None:
    old = {"text": None, "tool_call": {"name": "a", "args": {"x": 1}}}
    assert ModelOutput.from_json(old, {"input_tokens": 5, "output_tokens": 6}) == ModelOutput(
        tool_call=A, usage=Usage(5, 6)
    )


def test_tool_call_and_tool_calls_must_agree() -> None:
    assert ModelOutput(tool_call=A, tool_calls=(A, B)).tool_calls == (A, B)
    with pytest.raises(ValueError, match="first"):
        ModelOutput(tool_call=B, tool_calls=(A, B))


def test_usage_log_form_adds_cache_counts_only_when_reported() -> None:
    assert Usage(1, 2).to_json() == {"input_tokens": 1, "output_tokens": 2}
    assert Usage(1, 2, cache_read_input_tokens=0).to_json() == {
        "input_tokens": 1,
        "output_tokens": 2,
        "cache_read_input_tokens": 0,
    }
    assert Usage.from_json({"input_tokens": 1}) == Usage(1, 0)


async def test_scripted_model_plays_several_calls_in_one_output() -> None:
    model = ScriptedModel(
        [
            {"calls": [{"tool": "a", "args": {"x": 1}}, {"tool": "b"}], "text": "both"},
            {"tool": "a", "args": {"x": 1}},
            {"final": "done"},
        ]
    )
    first = await model.complete([], [])
    assert first == ModelOutput(text="both", tool_calls=(A, B))
    assistant = {"role": "assistant", "content": None, "tool_call": None}
    assert (await model.complete([assistant], [])).tool_calls == (A,)
    assert (await model.complete([assistant, assistant], [])).text == "done"


@pytest.mark.parametrize(
    "bad",
    [
        {"calls": []},
        {"calls": "a"},
        {"calls": [{"args": {}}]},
        {"calls": [{"tool": "a", "args": [1]}]},
        {"calls": [{"tool": "a"}], "final": "x"},
        {"tool": "a", "calls": [{"tool": "a"}]},
    ],
)
def test_scripted_model_refuses_malformed_calls(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="scripted output 0"):
        ScriptedModel([bad])
