"""Live spans from a traced store, read from the SDK's in-memory exporter, across a crash and a resume."""

from __future__ import annotations

import json

import pytest

from polyloop import Agent, ScriptedModel, tool
from polyloop.otel import instrument, rebuild
from polyloop.testing import MemoryStore

KEY_SEEN: list[str] = []


class Killed(BaseException):
    """Stands for a SIGKILL: nothing after it runs in the 'process' (no except clause catches it)."""


def _agent(*, die: bool = False, usage: bool = True) -> Agent:
    state = {"die": die}

    @tool(replay="safe")
    async def fetch(url: str, ctx=None) -> str:
        """Read a page (idempotent)."""
        KEY_SEEN.append(ctx.idempotency_key)
        if state["die"]:
            state["die"] = False
            raise Killed()
        return f"page {url}: 3 open invoices"

    @tool
    def send(to: str, body: str) -> str:
        """Send an email."""
        return f"sent to {to}"

    outputs = [
        {"tool": "fetch", "args": {"url": "https://example.test/secret-page"}},
        {"tool": "send", "args": {"to": "ops@example.test", "body": "TOP SECRET BODY"}},
        {"final": "done"},
    ]
    if usage:
        for o in outputs:
            o["usage"] = {"input_tokens": 11, "output_tokens": 7}
    return Agent(model=ScriptedModel(outputs), tools=[fetch, send])


def _by_name(spans) -> dict[str, list]:
    out: dict[str, list] = {}
    for s in spans:
        out.setdefault(s.name.split(" ")[0], []).append(s)
    return out


async def test_a_run_is_one_invoke_agent_span_with_a_chat_span_per_call_and_an_execute_tool_span_per_tool(sink):
    store = instrument(MemoryStore(), tracer_provider=sink.tracer_provider, meter_provider=sink.meter_provider)
    result = await _agent().run("tell ops", run_id="r1", store=store)
    assert result.reason == "final_answer"
    spans = _by_name(sink.spans())
    (root,) = spans["invoke_agent"]
    assert root.parent is None and len(spans["chat"]) == 3 and len(spans["execute_tool"]) == 2
    assert {s.context.trace_id for s in sink.spans()} == {root.context.trace_id}
    for s in spans["chat"] + spans["execute_tool"]:
        assert s.parent.span_id == root.context.span_id
    assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root.attributes["gen_ai.conversation.id"] == "r1"
    assert root.attributes["polyloop.run.finish_reason"] == "final_answer"
    chat = spans["chat"][0]
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.usage.input_tokens"] == 11 and chat.attributes["gen_ai.usage.output_tokens"] == 7
    tool_span = spans["execute_tool"][0]
    assert tool_span.name == "execute_tool fetch"
    assert tool_span.attributes["gen_ai.tool.name"] == "fetch"
    assert tool_span.attributes["gen_ai.tool.call.id"] == "s1-m1"
    assert tool_span.attributes["polyloop.replay.policy"] == "safe"
    # The trace context is in the log: run_started records the root span.
    started = (await store.wrapped.read_log("r1"))[0]
    assert started.trace == f"00-{root.context.trace_id:032x}-{root.context.span_id:016x}-01"


async def test_content_and_raw_keys_are_never_recorded_unless_content_is_opted_in(sink):
    KEY_SEEN.clear()
    store = instrument(MemoryStore(), tracer_provider=sink.tracer_provider)
    await _agent().run("tell ops", run_id="r1", store=store)
    dumped = json.dumps([dict(s.attributes) for s in sink.spans()] + [[dict(e.attributes) for e in s.events]
                                                                      for s in sink.spans()])
    assert "TOP SECRET" not in dumped and "secret-page" not in dumped
    assert KEY_SEEN and all(key not in dumped for key in KEY_SEEN)
    assert "polyloop.idempotency_key.sha256" in dumped

    other = type(sink)()
    store = instrument(MemoryStore(), tracer_provider=other.tracer_provider, capture_content=True)
    await _agent().run("tell ops", run_id="r2", store=store)
    dumped = json.dumps([dict(s.attributes) for s in other.spans()])
    assert "TOP SECRET" in dumped and "gen_ai.tool.call.arguments" in dumped and "gen_ai.output.messages" in dumped
    assert all(key not in dumped for key in KEY_SEEN)


async def test_a_resume_continues_the_trace_reports_the_cut_spans_and_never_the_reused_ones(sink):
    inner = MemoryStore()
    crashed = type(sink)()  # what the crashed process's exporter got: lost, as after a SIGKILL
    with pytest.raises(Killed):
        await _agent(die=True).run("tell ops", run_id="r1", store=instrument(inner, tracer_provider=crashed.tracer_provider))
    root_id = {s.name: s for s in crashed.spans()}["invoke_agent agent"].context
    result = await _agent().run("tell ops", run_id="r1", store=instrument(
        inner, tracer_provider=sink.tracer_provider, meter_provider=sink.meter_provider))
    assert result.reason == "final_answer"
    spans = sink.spans()
    assert {s.context.trace_id for s in spans} == {root_id.trace_id}
    by_rid = {}
    for s in spans:
        rid = s.attributes.get("polyloop.result.id")
        if rid is not None:
            assert rid not in by_rid, f"{rid} reported twice"
            by_rid[rid] = s
    assert "s1-m1" not in by_rid  # the model answer of step 1 was reused, not asked again
    cut = by_rid["s1-a1"]
    assert cut.attributes["polyloop.execution.state"] == "unknown" and cut.attributes["error.type"] == "polyloop.unknown"
    assert cut.parent.span_id == root_id.span_id
    assert by_rid["s1-a2"].attributes["polyloop.replay"] is True
    processes = sorted((s for s in spans if s.name.startswith("invoke_agent")), key=lambda s: s.start_time)
    dead, resumed = processes
    assert dead.context.span_id == root_id.span_id and dead.attributes["error.type"] == "polyloop.crashed"
    assert resumed.parent.span_id == root_id.span_id
    assert [link.context.span_id for link in resumed.links] == [root_id.span_id]
    events = {e.name: dict(e.attributes) for e in resumed.events}
    assert events["polyloop.reused"]["polyloop.result.id"] == "s1-m1"
    assert events["polyloop.unknown"]["polyloop.recovery.verdict"] == "replay"
    for rid in ("s1-a2", "s2-m1", "s2-a1", "s3-m1"):
        assert by_rid[rid].parent.span_id == resumed.context.span_id
    points = sink.points()
    assert sum(p.value for p in points["polyloop.replays"]) == 1
    assert sum(p.value for p in points["polyloop.executions.unknown"]) == 1
    assert sum(p.value for p in points["polyloop.resumes"]) == 1
    assert sum(p.count for p in points["gen_ai.client.operation.duration"]) == 2  # s2-m1, s3-m1: not s1-m1
    # The log alone gives the same spans, with the same ids.
    rebuilt = rebuild(await inner.read_log("r1"), "r1")
    assert rebuilt.trace_id == f"{root_id.trace_id:032x}"
    live_ids = {f"{s.context.span_id:016x}" for s in spans}
    assert live_ids <= {s.span_id for s in rebuilt.spans}


async def test_metrics_count_runs_tokens_and_durations(sink):
    store = instrument(MemoryStore(), tracer_provider=sink.tracer_provider, meter_provider=sink.meter_provider)
    await _agent().run("tell ops", run_id="r1", store=store)
    points = sink.points()
    assert sum(p.value for p in points["polyloop.runs.started"]) == 1
    (finished,) = points["polyloop.runs.finished"]
    assert finished.attributes["polyloop.run.finish_reason"] == "final_answer" and finished.value == 1
    usage = {p.attributes["gen_ai.token.type"]: p.sum for p in points["gen_ai.client.token.usage"]}
    assert usage == {"input": 33, "output": 21}
    assert sum(p.count for p in points["gen_ai.client.operation.duration"]) == 3


async def test_a_crash_a_person_settled_before_the_resume_is_still_reported_by_the_resume(sink):
    from polyloop import NeedsOperatorError, mark_resolved

    inner = MemoryStore()
    state = {"die": True}

    @tool
    async def send(to: str) -> str:
        """Send an email (never replayed)."""
        if state["die"]:
            state["die"] = False
            raise Killed()
        return "sent"

    def agent() -> Agent:
        return Agent(model=ScriptedModel([{"tool": "send", "args": {"to": "ops"}}, {"final": "done"}]), tools=[send])

    lost = type(sink)()
    with pytest.raises(Killed):
        await agent().run("tell ops", run_id="r1", store=instrument(inner, tracer_provider=lost.tracer_provider))
    with pytest.raises(NeedsOperatorError):  # the resume stops: nothing is written, nothing reported
        await agent().run("tell ops", run_id="r1", store=instrument(inner, tracer_provider=sink.tracer_provider))
    assert sink.spans() == []
    await mark_resolved(inner, "r1", "s1-a1", executed=True, observation="sent", reason="the mail is there")
    result = await agent().run("tell ops", run_id="r1", store=instrument(
        inner, tracer_provider=sink.tracer_provider, meter_provider=sink.meter_provider))
    assert result.reason == "final_answer"
    spans = {s.attributes.get("polyloop.result.id", s.name + str(s.attributes.get("polyloop.process"))): s
             for s in sink.spans()}
    assert spans["s1-a1"].attributes["error.type"] == "polyloop.unknown"  # the cut span, reported once
    assert spans["invoke_agent agent0"].attributes["error.type"] == "polyloop.crashed"
    resumed = spans["invoke_agent agent1"]
    assert [e.name for e in resumed.events] == ["polyloop.unknown", "polyloop.resolved", "polyloop.reused",
                                                "polyloop.reused"]
    assert len(sink.spans()) == 4  # the two cut ones, the resume's span, one chat (s2-m1): nothing twice
    assert sum(p.value for p in sink.points()["polyloop.executions.unknown"]) == 1


async def test_approvals_waiting_go_up_when_a_call_waits_and_down_when_the_resume_finds_it_decided(sink):
    from polyloop import ApprovalRequiredError, approve

    @tool(approval="required")
    def pay(amount: int) -> str:
        """Pay (a person approves first)."""
        return "paid"

    def agent() -> Agent:
        return Agent(model=ScriptedModel([{"tool": "pay", "args": {"amount": 5}}, {"final": "done"}]), tools=[pay])

    inner = MemoryStore()
    traced = dict(tracer_provider=sink.tracer_provider, meter_provider=sink.meter_provider)
    with pytest.raises(ApprovalRequiredError):
        await agent().run("pay", run_id="r1", store=instrument(inner, **traced))
    assert sum(p.value for p in sink.points()["polyloop.approvals.waiting"]) == 1
    await approve(inner, "r1", "s1-a1", reason="fine")  # an untraced command, as `polyloop approve` is
    assert (await agent().run("pay", run_id="r1", store=instrument(inner, **traced))).reason == "final_answer"
    points = sink.points()
    assert sum(p.value for p in points["polyloop.approvals.waiting"]) == 0
    assert sum(p.count for p in points["polyloop.approvals.wait.duration"]) == 1
    names = [e.name for s in sink.spans() if s.name.startswith("invoke_agent") for e in s.events]
    assert names.count("polyloop.approval_requested") == 1 and names.count("polyloop.decided") == 1


async def test_a_run_started_inside_a_span_of_yours_is_its_child_and_resumes_stay_in_that_trace(sink):
    inner = MemoryStore()
    tracer = sink.tracer_provider.get_tracer("yours")
    with tracer.start_as_current_span("handle request") as mine:
        with pytest.raises(Killed):
            await _agent(die=True).run("tell ops", run_id="r1", store=instrument(inner, tracer_provider=sink.tracer_provider))
    await _agent().run("tell ops", run_id="r1", store=instrument(inner, tracer_provider=sink.tracer_provider))
    ours = mine.get_span_context()
    assert {s.context.trace_id for s in sink.spans()} == {ours.trace_id}
    # The first process's span as it ended (here the 'crash' is an exception, so it did end) is a
    # child of yours; the copy its resume reports for a killed process cannot know your span.
    first = [s for s in sink.spans() if s.attributes.get("polyloop.process") == 0 and s.name.startswith("invoke")]
    assert [s.parent.span_id for s in first if s.parent is not None] == [ours.span_id]
