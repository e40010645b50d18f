"""Every field of both providers' answers, missing, wrong-typed and hostile, over a real socket.

An answer the adapter cannot read is a `MalformedResponseError` (a failed
attempt the run loop asks again), never a raw exception that ends the run at
attempt 1; the error names the field and still carries the usage the server
reported.
"""

from __future__ import annotations

import dataclasses
import gzip
import math
from pathlib import Path
from typing import Any

import pytest
from providers import ANTHROPIC, HISTORY, OPENAI, PROVIDERS, SPECS, Provider

from polyloop import Agent, Intent, JsonlStore, ModelCallResult, ModelOutput, ToolCall, TransientModelError, Usage, tool
from polyloop._run.answer import MAX_ANSWER_BYTES, MAX_NAME_LENGTH, MAX_TOKEN_COUNT
from polyloop.openai import MalformedResponseError
from polyloop.testing import FakeResponse
from polyloop.testing._fake_http import DELETE

LONG = "x" * (MAX_NAME_LENGTH + 1)
NASTY = "look\x1b[31mup"  # an ESC sequence: a terminal would obey it
BIDI = "look\u202eup"  # a format character that reverses what a terminal shows

BODIES = [
    ("not-json", FakeResponse.raw("not json"), "not JSON"),
    ("empty", FakeResponse.raw(""), "body is empty"),
    ("blank", FakeResponse.raw(" \n"), "body is empty"),
    ("html", FakeResponse.raw("<html><body>502 Bad Gateway</body></html>", content_type="text/html"), "not JSON"),
    ("array", FakeResponse.raw("[1, 2]"), "a JSON array, not an object"),
    ("string", FakeResponse.raw('"hello"'), "a JSON string, not an object"),
    ("number", FakeResponse.raw("42"), "a JSON number, not an object"),
    ("null", FakeResponse.raw("null"), "a JSON null, not an object"),
    ("nan", FakeResponse.raw('{"model": NaN}'), "not JSON"),
    ("lone-surrogate", FakeResponse.raw('{"model": "\\ud800"}'), "not JSON"),
    ("not-utf8", FakeResponse.raw(b'{"model": "\xff"}'), "not JSON"),
    ("truncated", FakeResponse.raw('{"choices": [{"message": {"content": "hi'), "not JSON"),
    ("deep", FakeResponse.raw("[" * 100_000 + "]" * 100_000), "not JSON"),
    ("too-large", FakeResponse.raw(b" " * (MAX_ANSWER_BYTES + 1)), "larger than"),
    (
        "gzip-bomb",
        FakeResponse(
            body=gzip.compress(b" " * (MAX_ANSWER_BYTES + 1)),
            headers=(("content-type", "application/json"), ("content-encoding", "gzip")),
        ),
        "larger than",
    ),
]


async def _complete(provider: Provider, reply: FakeResponse) -> ModelOutput:
    with provider.server([reply]) as server:
        return await provider.adapter(server).complete(HISTORY, SPECS)


async def _refused(provider: Provider, reply: FakeResponse) -> MalformedResponseError:
    with pytest.raises(MalformedResponseError) as caught:
        await _complete(provider, reply)
    assert isinstance(caught.value, TransientModelError)  # a failed attempt, asked again
    return caught.value


@pytest.mark.parametrize("provider", PROVIDERS, ids=str)
@pytest.mark.parametrize(("reply", "words"), [b[1:] for b in BODIES], ids=[b[0] for b in BODIES])
async def test_a_body_that_is_not_a_json_object_is_a_malformed_answer(
    provider: Provider, reply: FakeResponse, words: str
) -> None:
    error = await _refused(provider, reply)
    assert words in str(error)
    assert len(str(error)) < 400  # a preview of the body, not the body


WRONG = {
    "object": [5, "a", ["a"], True],
    "list": [5, "a", {"a": 1}, True],
    "text": [5, 1.5, ["a"], {"a": 1}, True],
    "name": [5, ["a"], {"a": 1}, True, "", LONG, NASTY, BIDI, "look\x00up", "look\nup"],
    "count": ["12", 1.5, 12.0, True, -1, MAX_TOKEN_COUNT + 1, 10**30, [1], {"n": 1}],
    "arguments": [5, ["a"], {"city": "Oslo"}, True],
}


def _cases(path: str, kind: str, *, missing: bool = True, null: bool = True) -> list[tuple[str, Any]]:
    """(path, value) pairs, each a value wrong for the field: a wrong type, or left out or null when
    the field must be there."""
    return [(path, v) for v in WRONG[kind]] + [(path, DELETE)] * missing + [(path, None)] * null


def _case_id(case: tuple[str, Any]) -> str:
    path, value = case
    shown = "DELETE" if value is DELETE else repr(value) if isinstance(value, (str, int)) else type(value).__name__
    return f"{path}={shown[:24]}"


CALLS = "choices.0.message.tool_calls"
CALL = f"{CALLS}.0"
OPENAI_CASES = [
    *_cases("model", "name"),
    *_cases("choices", "list"),
    ("choices", []),
    ("choices", [5]),
    ("choices", [None]),
    *_cases("choices.0.message", "object"),
    *_cases("choices.0.message.content", "text", missing=False, null=False),
    *_cases("choices.0.message.refusal", "text", missing=False, null=False),
    *_cases("choices.0.finish_reason", "name", null=False),
    *_cases(CALLS, "list", missing=False, null=False),
    (CALLS, [5]),
    (CALLS, [None]),
    (CALLS, ["lookup"]),
    *_cases(f"{CALL}.id", "name"),
    *_cases(f"{CALL}.type", "name", missing=False, null=False),
    *_cases(f"{CALL}.function", "object"),
    *_cases(f"{CALL}.function.name", "name"),
    *_cases(f"{CALL}.function.arguments", "arguments"),
    *_cases("usage", "object", missing=False, null=False),
    *_cases("usage.prompt_tokens", "count"),
    *_cases("usage.completion_tokens", "count"),
]
OPENAI_ARGUMENTS = ["{bad", "[1, 2]", '"Oslo"', "null", "42", '{"city": NaN}', '{"city": "\\ud800"}', "[" * 5000]


@pytest.mark.parametrize("case", OPENAI_CASES, ids=_case_id)
async def test_every_field_of_an_openai_answer_is_checked(case: tuple[str, Any]) -> None:
    path, value = case
    error = await _refused(OPENAI, OPENAI.full.edit(path, value))
    assert _named(path) in str(error) or "arguments that are not a JSON object" in str(error)
    if not path.startswith("usage"):
        assert error.usage == Usage(10, 2)  # the tokens the unreadable answer cost are still recorded


@pytest.mark.parametrize("raw", OPENAI_ARGUMENTS, ids=lambda raw: repr(raw)[:24])
async def test_openai_arguments_must_be_a_json_object_in_a_string(raw: str) -> None:
    error = await _refused(OPENAI, OPENAI.full.edit(f"{CALL}.function.arguments", raw))
    assert error.raw == raw and error.usage == Usage(10, 2)
    assert "'lookup' with arguments that are not a JSON object" in str(error)


TOOL_USE = "content.1"
ANTHROPIC_CASES = [
    *_cases("model", "name"),
    *_cases("content", "list"),
    ("content", [5]),
    ("content", [None]),
    ("content", ["text"]),
    ("content.0", {"text": "a block without a type"}),
    *_cases("content.0.type", "name"),
    *_cases("content.0.text", "text"),
    *_cases(f"{TOOL_USE}.id", "name"),
    *_cases(f"{TOOL_USE}.name", "name"),
    *_cases(f"{TOOL_USE}.input", "object"),
    *_cases("stop_reason", "name", null=False),
    *_cases("usage", "object", missing=False, null=False),
    *_cases("usage.input_tokens", "count"),
    *_cases("usage.output_tokens", "count"),
    *_cases("usage.cache_read_input_tokens", "count", missing=False, null=False),
    *_cases("usage.cache_creation_input_tokens", "count", missing=False, null=False),
]


@pytest.mark.parametrize("case", ANTHROPIC_CASES, ids=_case_id)
async def test_every_field_of_an_anthropic_answer_is_checked(case: tuple[str, Any]) -> None:
    path, value = case
    error = await _refused(ANTHROPIC, ANTHROPIC.full.edit(path, value))
    assert _named(path) in str(error) or "arguments that are not a JSON object" in str(error)
    if not path.startswith("usage"):
        assert error.usage == Usage(10, 2, 3, 4)


def _named(path: str) -> str:
    """How the error names the field at a dotted path: `choices[0].message`."""
    parts = [f"[{p}]" if p.isdigit() else f".{p}" for p in path.split(".")]
    return "".join(parts).lstrip(".")


A_CALL = ToolCall("lookup", {"city": "Oslo"})
ALLOWED = [
    (OPENAI, OPENAI.full, ModelOutput("Checking.", tool_calls=[A_CALL], usage=Usage(10, 2))),
    (OPENAI, OPENAI.full.edit("choices.0.message.content", None), ModelOutput(None, A_CALL, Usage(10, 2))),
    (OPENAI, OPENAI.full.edit("choices.0.message.content", DELETE), ModelOutput(None, A_CALL, Usage(10, 2))),
    (OPENAI, FakeResponse.final("done", usage=(1, 1)).edit(CALLS, None), ModelOutput("done", usage=Usage(1, 1))),
    (OPENAI, OPENAI.full.edit("usage", DELETE), ModelOutput("Checking.", A_CALL)),
    (OPENAI, OPENAI.full.edit("usage", None), ModelOutput("Checking.", A_CALL)),
    (OPENAI, OPENAI.full.edit("choices.0.finish_reason", None), ModelOutput("Checking.", A_CALL, Usage(10, 2))),
    (OPENAI, OPENAI.full.edit(f"{CALL}.type", DELETE), ModelOutput("Checking.", A_CALL, Usage(10, 2))),
    (OPENAI, OPENAI.full.edit(f"{CALL}.type", "custom"), ModelOutput("Checking.", usage=Usage(10, 2))),
    (OPENAI, OPENAI.full.edit(f"{CALL}.function.arguments", " "), ModelOutput(
        "Checking.", ToolCall("lookup", {}), Usage(10, 2))),
    (OPENAI, FakeResponse.final("", usage=False).edit("choices.0.message.refusal", "I can't."),
     ModelOutput("I can't.")),
    (OPENAI, OPENAI.full.edit("usage.prompt_tokens", MAX_TOKEN_COUNT), ModelOutput(
        "Checking.", A_CALL, Usage(MAX_TOKEN_COUNT, 2))),
    (ANTHROPIC, ANTHROPIC.full, ModelOutput(
        "Checking.", A_CALL, Usage(10, 2, 3, 4), stop_reason="tool_use")),
    (ANTHROPIC, ANTHROPIC.full.edit("stop_reason", None), ModelOutput("Checking.", A_CALL, Usage(10, 2, 3, 4))),
    (ANTHROPIC, ANTHROPIC.full.edit("usage", DELETE), ModelOutput("Checking.", A_CALL, stop_reason="tool_use")),
    (ANTHROPIC, ANTHROPIC.full.edit("usage.cache_read_input_tokens", None), ModelOutput(
        "Checking.", A_CALL, Usage(10, 2, None, 4), stop_reason="tool_use")),
    (ANTHROPIC, ANTHROPIC.full.edit("content.0", {"type": "thinking", "thinking": "hmm", "signature": "s"}),
     ModelOutput(None, A_CALL, Usage(10, 2, 3, 4), stop_reason="tool_use")),
    (ANTHROPIC, ANTHROPIC.full.edit("content", []), ModelOutput("", usage=Usage(10, 2, 3, 4), stop_reason="tool_use")),
]


@pytest.mark.parametrize(("provider", "reply", "expected"), ALLOWED, ids=[
    "openai-full", "content-null", "content-missing", "tool-calls-null", "usage-missing", "usage-null",
    "finish-reason-null", "type-missing", "custom-call-skipped", "blank-arguments", "refusal", "max-count",
    "anthropic-full", "stop-reason-null", "anthropic-usage-missing", "cache-count-null", "thinking-skipped",
    "no-content",
])
async def test_what_the_apis_allow_is_read(provider: Provider, reply: FakeResponse, expected: ModelOutput) -> None:
    got = await _complete(provider, reply)
    assert got.model == "fake-model"  # the answer's `model` (the fakes answer with the model asked for)
    assert got == dataclasses.replace(expected, model="fake-model")


@pytest.mark.parametrize("provider", PROVIDERS, ids=str)
async def test_the_model_that_answered_is_kept_as_the_answer_names_it(provider: Provider) -> None:
    # A provider answers with the precise model it ran (an alias resolved to a dated version).
    got = await _complete(provider, provider.full.edit("model", "fake-model-2026-12-01"))
    assert got.model == "fake-model-2026-12-01"
    assert got.to_json()["model"] == "fake-model-2026-12-01"
    assert got.usage is not None
    assert ModelOutput.from_json(got.to_json(), got.usage.to_json()) == got  # as a resume reads it back


TEXT = "line\tone\nline two \x1b[31mred\x1b[0m \u202eevil\u202c \x00 " + "é" * 10_000


@pytest.mark.parametrize("provider", PROVIDERS, ids=str)
async def test_text_and_arguments_are_data_kept_verbatim(provider: Provider) -> None:
    # Control characters in text and arguments are the model's data: recorded as they came
    # (the log escapes them, and every terminal view shows them escaped), never refused.
    reply = FakeResponse.tool_call("lookup", {"city": TEXT}, text=TEXT, usage=(10, 2))
    out = await _complete(provider, reply)
    assert out.text == TEXT and out.tool_calls == (ToolCall("lookup", {"city": TEXT}),)


@tool(replay="safe")
def lookup(city: str) -> str:
    """Look up the weather in a city."""
    return f"{city}: sunny"


@pytest.mark.parametrize("provider", PROVIDERS, ids=str)
@pytest.mark.parametrize(
    "bad",
    [
        FakeResponse.raw("<html>502</html>", content_type="text/html"),
        FakeResponse.final("x").edit("usage", {"prompt_tokens": "many", "input_tokens": "many"}),
        FakeResponse.final("x").edit("model", math.inf),
    ],
    ids=["html", "usage-not-numeric", "model-infinite"],
)
async def test_a_malformed_answer_is_a_failed_attempt_then_a_new_one(
    provider: Provider, bad: FakeResponse, tmp_path: Path
) -> None:
    store = JsonlStore(tmp_path)
    with provider.server([bad, FakeResponse.final("sunny", usage=(7, 1))]) as server:
        agent = Agent(model=provider.adapter(server), tools=[lookup], retry_backoff=0.01)
        result = await agent.run("weather?", run_id="r", store=store)
    assert (result.reason, result.text) == ("final_answer", "sunny")
    records = list(await store.read_log("r"))
    assert [r.result_id for r in records if isinstance(r, Intent)] == ["s1-m1", "s1-m2"]
    first, second = [r for r in records if isinstance(r, ModelCallResult)]
    assert first.output is None and (first.error or "").startswith("MalformedResponseError: the answer")
    assert (second.output or {})["text"] == "sunny" and (second.output or {})["tool_call"] is None
