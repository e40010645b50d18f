"""The run loop: intent first, results under pre-allocated ids, resume by the log."""

from __future__ import annotations

import asyncio
from types import MappingProxyType

import pytest

from polyloop import (
    Agent,
    CorruptLogError,
    ModelCallError,
    ModelOutput,
    NeedsOperatorError,
    RunActiveError,
    RunExistsError,
    RunMismatchError,
    ScriptedModel,
    StoreError,
    ToolContext,
    TransientModelError,
    Usage,
    classify,
    mark_resolved,
    tool,
)
from polyloop.testing import MemoryStore



class Counting:
    """Wraps a model and counts its calls."""

    def __init__(self, model):
        self.model = model
        self.calls = 0
        self.seen = []

    async def complete(self, messages, tools):
        self.calls += 1
        self.seen.append(list(messages))
        return await self.model.complete(messages, tools)


class Crash(BaseException):
    """Stands for the process dying: nothing in the loop may record it."""


def make(script, *, effects=None, crash_in=None, replay="never", **kw):
    effects = effects if effects is not None else []

    @tool(replay=replay)
    def act(n: int, ctx: ToolContext) -> str:
        """Do a side effect."""
        effects.append((n, ctx.attempt, ctx.idempotency_key))
        if crash_in is not None and crash_in(n, ctx):
            raise Crash
        return f"did {n}"

    @tool(replay="safe")
    async def look(n: int) -> dict:
        """Read something."""
        return {"n": n}

    @tool
    def broken(n: int) -> str:
        """Always fails."""
        raise ValueError(f"bad {n}")

    model = Counting(ScriptedModel(script))
    return Agent(model=model, tools=[act, look, broken], **kw), model, effects


SCRIPT = [
    {"tool": "act", "args": {"n": 1}},
    {"tool": "look", "args": {"n": 2}},
    {"tool": "act", "args": {"n": 3}},
    {"final": "done"},
]


async def test_a_run_finishes_and_the_log_tells_it_all(memory):
    agent, model, effects = make(SCRIPT)
    result = await agent.run("goal", run_id="r", store=memory)
    assert (result.text, result.reason, result.steps, result.final) == ("done", "final_answer", 4, "done")
    assert [e[0] for e in effects] == [1, 3]
    recovery = classify(await memory.read_log("r"), run_id="r")
    assert recovery.status == "finished"
    assert [e.result_id for e in recovery.executions] == [
        "s1-m1", "s1-a1", "s2-m1", "s2-a1", "s3-m1", "s3-a1", "s4-m1",
    ]
    assert all(e.state == "done" for e in recovery.executions)
    assert recovery.steps[1].completed.observation == '{"n":2}'


async def test_the_model_sees_goal_system_and_every_observation(memory):
    agent, model, _ = make(SCRIPT, system="be careful")
    await agent.run("the goal", run_id="r", store=memory)
    last = model.seen[-1]
    assert last[0] == {"role": "system", "content": "be careful"}
    assert last[1] == {"role": "user", "content": "the goal"}
    assert [m["role"] for m in last[2:]] == ["assistant", "tool"] * 3
    assert last[2]["tool_call"] == {"id": "s1-m1", "name": "act", "args": {"n": 1}}
    assert last[3] == {"role": "tool", "tool_call_id": "s1-m1", "name": "act", "content": "did 1"}


async def test_running_a_finished_run_again_returns_the_record(memory):
    agent, model, effects = make(SCRIPT)
    first = await agent.run("goal", run_id="r", store=memory)
    size = len(await memory.read_log("r"))
    again = await agent.run(run_id="r", store=memory)
    assert again == first
    assert model.calls == 4 and len(effects) == 2
    assert len(await memory.read_log("r")) == size


async def test_the_step_budget_ends_the_run_with_its_own_reason(memory):
    agent, _, _ = make(SCRIPT, max_steps=2)
    result = await agent.run("goal", run_id="r", store=memory)
    assert (result.reason, result.text, result.steps) == ("max_steps", None, 2)


async def test_tool_failures_and_unknown_tools_become_observations(memory):
    agent, _, _ = make([{"tool": "broken", "args": {"n": 7}}, {"tool": "nope", "args": {}},
                        {"tool": "act", "args": {"wrong": 1}}, {"final": "ok"}])
    result = await agent.run("goal", run_id="r", store=memory)
    assert result.text == "ok"
    steps = classify(await memory.read_log("r")).steps
    assert steps[0].completed.observation == "error: ValueError: bad 7" and steps[0].completed.is_error
    assert "unknown tool 'nope'" in steps[1].completed.observation and steps[1].completed.result_id is None
    # Arguments that do not fit the schema never reach the tool: no intent, a precise observation.
    assert steps[2].completed.is_error and steps[2].actions == () and steps[2].completed.result_id is None
    assert "n: required field missing" in steps[2].completed.observation
    assert "wrong: unexpected field" in steps[2].completed.observation


async def test_resume_skips_done_work_and_reuses_results(memory):
    effects = []
    agent, _, _ = make(SCRIPT, effects=effects, crash_in=lambda n, ctx: n == 3 and ctx.attempt == 1, replay="safe")
    with pytest.raises(Crash):
        await agent.run("goal", run_id="r", store=memory)
    agent2, model2, _ = make(SCRIPT, effects=effects, replay="safe")
    result = await agent2.run(run_id="r", store=memory)
    assert result.text == "done"
    assert model2.calls == 1  # only step 4's model call: steps 1-3 were reused
    assert [(n, a) for n, a, _ in effects] == [(1, 1), (3, 1), (3, 2)]
    assert effects[1][2] == effects[2][2]  # the idempotency key is stable across replays
    states = {e.result_id: e.state for e in classify(await memory.read_log("r")).executions}
    assert states["s3-a1"] == "superseded" and states["s3-a2"] == "done"


async def test_an_unknown_never_action_stops_resume_and_lists_it(memory):
    effects = []
    agent, _, _ = make(SCRIPT, effects=effects, crash_in=lambda n, ctx: n == 3)
    with pytest.raises(Crash):
        await agent.run("goal", run_id="r", store=memory)
    agent2, model2, _ = make(SCRIPT, effects=effects)
    with pytest.raises(NeedsOperatorError) as info:
        await agent2.run(run_id="r", store=memory)
    (e,) = info.value.executions
    assert (e.tool, e.args, e.result_id) == ("act", {"n": 3}, "s3-a1")
    assert "act({'n': 3})" in str(info.value) and "mark-resolved r s3-a1" in str(info.value)
    assert model2.calls == 0 and len(effects) == 2


async def test_an_executed_resolution_reuses_the_operators_observation(memory):
    effects = []
    agent, _, _ = make(SCRIPT, effects=effects, crash_in=lambda n, ctx: n == 3)
    with pytest.raises(Crash):
        await agent.run("goal", run_id="r", store=memory)
    await mark_resolved(memory, "r", "s3-a1", executed=True, observation="it landed", reason="checked")
    agent2, model2, _ = make(SCRIPT, effects=effects)
    result = await agent2.run(run_id="r", store=memory)
    assert result.text == "done" and len(effects) == 2
    recovery = classify(await memory.read_log("r"))
    assert recovery.steps[2].completed.observation == "it landed"
    assert model2.seen[-1][-1]["content"] == "it landed"
    assert recovery.execution("s3-a1").state == "resolved"


async def test_a_not_executed_resolution_runs_the_action_again(memory):
    effects = []
    agent, _, _ = make(SCRIPT, effects=effects, crash_in=lambda n, ctx: n == 3 and ctx.attempt == 1)
    with pytest.raises(Crash):
        await agent.run("goal", run_id="r", store=memory)
    await mark_resolved(memory, "r", "s3-a1", executed=False)
    result = await make(SCRIPT, effects=effects)[0].run(run_id="r", store=memory)
    assert result.text == "done"
    assert [(n, a) for n, a, _ in effects] == [(1, 1), (3, 1), (3, 2)]


async def test_an_unknown_model_call_is_reissued_as_a_new_attempt(memory):
    class DieOnce:
        def __init__(self):
            self.inner = ScriptedModel(SCRIPT)
            self.died = False

        async def complete(self, messages, tools):
            if len(messages) == 3 and not self.died:  # step 2: goal, assistant, tool
                self.died = True
                raise Crash
            return await self.inner.complete(messages, tools)

    model = DieOnce()
    agent = make(SCRIPT)[0]
    agent.model = model
    with pytest.raises(Crash):
        await agent.run("goal", run_id="r", store=memory)
    result = await agent.run(run_id="r", store=memory)
    assert result.text == "done"
    recovery = classify(await memory.read_log("r"))
    assert [(e.result_id, e.state) for e in recovery.steps[1].model_calls] == [
        ("s2-m1", "superseded"), ("s2-m2", "done"),
    ]


async def test_cancellation_leaves_the_run_resumable_without_run_finished(memory):
    started = asyncio.Event()

    @tool
    async def slow() -> str:
        """Sleeps."""
        started.set()
        await asyncio.sleep(30)
        return "late"

    agent = Agent(model=ScriptedModel([{"tool": "slow", "args": {}}, {"final": "x"}]), tools=[slow])
    task = asyncio.create_task(agent.run("goal", run_id="r", store=memory))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    recovery = classify(await memory.read_log("r"))
    assert recovery.finished is None
    assert recovery.status == "needs_operator" and recovery.blocking[0].tool == "slow"


async def test_transient_model_errors_are_retried_as_visible_attempts(memory):
    class Flaky:
        def __init__(self):
            self.n = 0

        async def complete(self, messages, tools):
            self.n += 1
            if self.n < 3:
                raise TransientModelError("429 slow down")
            return ModelOutput(text="ok", usage=Usage(10, 2))

    agent = Agent(model=Flaky(), retry_backoff=0.001)
    result = await agent.run("goal", run_id="r", store=memory)
    assert result.text == "ok"
    calls = classify(await memory.read_log("r")).steps[0].model_calls
    assert [(e.attempt, e.error) for e in calls] == [
        (1, "TransientModelError: 429 slow down"), (2, "TransientModelError: 429 slow down"), (3, None),
    ]
    assert calls[2].result.usage == {"input_tokens": 10, "output_tokens": 2}


async def test_a_failing_model_stops_the_run_resumable_then_the_budget_ends_it(memory):
    class Down:
        async def complete(self, messages, tools):
            raise ConnectionError("server down")

    agent = Agent(model=Down(), max_attempts=2)
    with pytest.raises(ModelCallError, match="server down"):
        await agent.run("goal", run_id="r", store=memory)
    assert classify(await memory.read_log("r")).status == "resumable"
    result = await agent.run(run_id="r", store=memory)
    assert (result.reason, result.error) == ("error", "the model call of step 1 failed 2 times")


class FailingStore(MemoryStore):
    def __init__(self, fail_on):
        super().__init__()
        self.fail_on = fail_on

    async def write_intent(self, run_id, record):
        if record.kind == self.fail_on:
            raise OSError(28, "No space left on device")
        await super().write_intent(run_id, record)


async def test_a_store_failure_stops_the_run_before_the_action(memory):
    effects = []
    agent, _, _ = make(SCRIPT, effects=effects)
    store = FailingStore("action")
    with pytest.raises(StoreError, match="No space left"):
        await agent.run("goal", run_id="r", store=store)
    assert effects == []  # the action never ran without its intent
    assert classify(await store.read_log("r")).status == "resumable"


async def test_resume_refuses_a_different_goal_or_budget(memory):
    agent, _, _ = make(SCRIPT)
    await agent.run("goal", run_id="r", store=memory, max_steps=9)
    with pytest.raises(RunMismatchError, match="goal"):
        await agent.run("other goal", run_id="r", store=memory)
    with pytest.raises(RunMismatchError, match="max_steps"):
        await agent.run(run_id="r", store=memory, max_steps=3)
    with pytest.raises(RunExistsError):
        await agent.run("goal", run_id="r", store=memory, new=True)


async def test_a_corrupt_log_is_refused(memory):
    agent, _, _ = make(SCRIPT)
    await agent.run("goal", run_id="r", store=memory)
    memory._logs["r"].insert(2, memory._logs["r"][1])  # a duplicated intent line
    with pytest.raises(CorruptLogError):
        await agent.run(run_id="r", store=memory)


async def test_two_runs_of_one_id_at_once_exclude_each_other(store):
    gate = asyncio.Event()

    @tool(replay="safe")
    async def wait() -> str:
        """Waits."""
        await gate.wait()
        return "ok"

    agent = Agent(model=ScriptedModel([{"tool": "wait", "args": {}}, {"final": "x"}]), tools=[wait])
    first = asyncio.create_task(agent.run("goal", run_id="r", store=store))
    await asyncio.sleep(0.05)
    with pytest.raises(RunActiveError):
        await agent.run("goal", run_id="r", store=store)
    gate.set()
    assert (await first).text == "x"


async def test_tools_get_their_context(memory):
    seen = []

    @tool
    def probe(ctx: ToolContext) -> str:
        """Probe."""
        seen.append(ctx)
        return "ok"

    agent = Agent(model=ScriptedModel([{"tool": "probe", "args": {}}, {"final": "x"}]), tools=[probe])
    await agent.run("goal", run_id="r", store=memory)
    (ctx,) = seen
    assert (ctx.run_id, ctx.step, ctx.attempt, ctx.result_id) == ("r", 1, 1, "s1-a1")
    assert ctx.idempotency_key.startswith("pl-")


def test_the_tool_decorator_declares_policy_and_schema():
    @tool
    def write(path: str, text: str, mode: int = 0) -> str:
        """Write a file."""
        return ""

    @tool(replay="safe", name="read")
    async def read_file(path: str, ctx: ToolContext) -> str:
        return ""

    assert write.replay == "never" and read_file.replay == "safe" and read_file.name == "read"
    assert write.spec() == {
        "name": "write",
        "description": "Write a file.",
        "parameters": {
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "text": {"type": "string"},
                "mode": {"type": "integer", "default": 0},
            },
            "required": ["path", "text"],
            "additionalProperties": False,
        },
    }
    assert "ctx" not in read_file.spec()["parameters"]["properties"]
    with pytest.raises(ValueError):
        tool(replay="sometimes")(lambda: None)


def test_a_scripted_model_copies_each_distinct_output_once():
    call = {"tool": "a", "args": {"x": 1}}
    model = ScriptedModel([call] * 1000 + [{"final": "done"}])
    assert len({id(o) for o in model.outputs}) == 2  # one copy of `call`, not a thousand
    call["args"] = {"x": 2}  # the script as given is copied: changing it later changes nothing
    assert model.outputs[999]["args"] == {"x": 1}
    # Distinct read-only mappings from a generator, each freed once read (so a later one can take
    # its id): every one keeps its own output.
    gen = ScriptedModel(MappingProxyType({"tool": "a", "args": {"x": i}}) for i in range(50))
    assert [o["args"]["x"] for o in gen.outputs] == list(range(50))


def test_scripted_model_validates_and_reads_files(tmp_path):
    path = tmp_path / "script.jsonl"
    path.write_text('{"tool": "a", "args": {"x": 1}}\n\n{"final": "done"}\n')
    assert len(ScriptedModel.from_file(path).outputs) == 2
    with pytest.raises(ValueError, match="scripted output 0"):
        ScriptedModel([{"nothing": 1}])
    path.write_text("{oops\n")
    with pytest.raises(ValueError, match="script.jsonl:1"):
        ScriptedModel.from_file(path)


async def test_retry_after_and_the_usage_of_failed_attempts_are_honoured(memory, monkeypatch):
    from polyloop._run.retry import Endpoint

    delays = []
    backoff = Endpoint.failed

    def no_wait(self, level, error, delay):  # record the backoff the run asked for, then wait none of it
        delays.append(delay)
        backoff(self, level, error, 0.0)

    class Limited:
        def __init__(self):
            self.n = 0

        async def complete(self, messages, tools):
            self.n += 1
            if self.n == 1:
                raise TransientModelError("429", retry_after=7.0, usage=Usage(5, 0))
            if self.n == 2:
                raise TransientModelError("429", retry_after=1e9)
            return ModelOutput(text="ok")

    monkeypatch.setattr(Endpoint, "failed", no_wait)
    agent = Agent(model=Limited(), retry_backoff=0.5)
    assert (await agent.run("goal", run_id="r", store=memory)).text == "ok"
    assert delays == [7.0, 60.0]  # the server's wish, capped at retry_max_delay
    first = classify(await memory.read_log("r")).steps[0].model_calls[0]
    assert first.result.usage == {"input_tokens": 5, "output_tokens": 0}


async def test_refusing_a_new_run_leaves_an_existing_log_untouched(store):
    agent, _, _ = make(SCRIPT)
    await agent.run("goal", run_id="r", store=store, max_steps=1)
    store.path("r").write_bytes(store.path("r").read_bytes() + b'{"record":"inte')  # a torn tail
    before = store.path("r").read_bytes()
    with pytest.raises(RunExistsError):
        await agent.run("goal", run_id="r", store=store, new=True)
    assert store.path("r").read_bytes() == before


async def test_usage_is_recorded_as_token_counts(memory):
    class Sloppy:
        async def complete(self, messages, tools):
            return ModelOutput(text="ok", usage=Usage(3.0, "4"))  # type: ignore[arg-type]

    await Agent(model=Sloppy()).run("goal", run_id="r", store=memory)
    (call,) = classify(await memory.read_log("r")).steps[0].model_calls
    assert call.result.usage == {"input_tokens": 3, "output_tokens": 4}


def test_a_plain_function_is_refused_with_a_hint():
    def plain(x: int) -> int:
        return x

    with pytest.raises(TypeError, match="decorate it with @polyloop.tool"):
        Agent(model=ScriptedModel([{"final": "x"}]), tools=[plain])


async def test_inspect_says_when_a_failed_model_call_stopped_the_run(memory):
    from polyloop import inspect_run

    class Down:
        async def complete(self, messages, tools):
            raise ConnectionError("server down")

    with pytest.raises(ModelCallError):
        await Agent(model=Down()).run("goal", run_id="r", store=memory)
    report = await inspect_run(memory, "r")
    assert report.status == "resumable"
    assert report.reason == "the model call of step 1 failed (ConnectionError: server down); resume tries it again"
