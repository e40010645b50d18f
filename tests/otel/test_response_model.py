"""`gen_ai.response.model`: the model the provider says answered, from the log, seen by a real OTLP receiver."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from polyloop import Agent, JsonlStore, ModelCallResult, ScriptedModel, tool
from polyloop.openai import OpenAIModel
from polyloop.otel import instrument, rebuild
from polyloop.testing import FakeOpenAIServer, FakeResponse, MemoryStore

from .receiver import otlp_receiver

ASKED = "fake-model"
ANSWERED = "fake-model-2026-12-01"  # a provider names the precise model that ran (an alias resolved)


@tool(replay="safe")
def lookup(city: str) -> str:
    """Look up the weather of a city."""
    return f"{city}: 21°C, sunny"


def _chats(spans: list, attributes: Callable[[Any], Any]) -> dict[str, dict]:
    """The attributes of each `chat` span, by result id."""
    out = {}
    for s in spans:
        if s.name.startswith("chat "):
            attrs = dict(attributes(s))
            out[attrs["polyloop.result.id"]] = attrs
    return out


async def test_a_chat_span_names_the_model_asked_for_and_the_one_that_answered(tmp_path: Path) -> None:
    script = [
        FakeResponse.tool_call("lookup", {"city": "Oslo"}, usage=(10, 2)).edit("model", ANSWERED),
        FakeResponse.error(500),  # a failed attempt: no answer, so no response model
        FakeResponse.final("Sunny in Oslo.", usage=(20, 3)),  # the fake answers with the model asked for
    ]
    with otlp_receiver() as live, FakeOpenAIServer(script, api_key="k") as server:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{live.url}/v1/traces")))
        model = OpenAIModel(model=ASKED, base_url=server.base_url, api_key="k", timeout=10)
        agent = Agent(model=model, tools=[lookup], max_attempts=3, retry_backoff=0.01)
        store = instrument(JsonlStore(tmp_path), tracer_provider=provider)
        result = await agent.run("weather in Oslo?", run_id="r", store=store)
        provider.shutdown()
    assert result.reason == "final_answer"
    chats = _chats(live.spans, lambda s: s.attributes)
    assert set(chats) == {"s1-m1", "s2-m1", "s2-m2"}
    assert {rid: a["gen_ai.request.model"] for rid, a in chats.items()} == dict.fromkeys(chats, ASKED)
    assert chats["s1-m1"]["gen_ai.response.model"] == ANSWERED
    assert "gen_ai.response.model" not in chats["s2-m1"]  # the attempt that failed
    assert chats["s2-m2"]["gen_ai.response.model"] == ASKED
    # The log keeps it (model_call_result.output.model), so the log alone gives the same spans.
    records = await JsonlStore(tmp_path).read_log("r")
    rebuilt = _chats(rebuild(records, "r").spans, lambda s: s.attributes)
    assert {rid: a.get("gen_ai.response.model") for rid, a in rebuilt.items()} == {
        "s1-m1": ANSWERED, "s2-m1": None, "s2-m2": ASKED}


async def test_a_log_that_records_no_answering_model_has_no_response_model(sink) -> None:
    # What older logs and models that report none (a scripted one) write: no `output.model`.
    agent = Agent(model=ScriptedModel([{"final": "done"}]))
    traced = instrument(MemoryStore(), tracer_provider=sink.tracer_provider)
    await agent.run("go", run_id="r", store=traced)
    (chat,) = [s for s in sink.spans() if s.name.startswith("chat ")]
    assert chat.attributes["polyloop.execution.state"] == "done"
    assert "gen_ai.response.model" not in chat.attributes
    [result] = [r for r in await traced.wrapped.read_log("r") if isinstance(r, ModelCallResult)]
    assert result.output is not None and "model" not in result.output
