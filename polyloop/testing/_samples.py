"""What the storage contract's properties are made of: sample logs of every record kind, the
agent they run, and a store wrapper that stops a run after a chosen write (polyloop/testing/_contract.py)."""

from __future__ import annotations

import inspect

from typing import Any

from .._log.ids import idempotency_key, rollback_key
from .._log.model_port import ScriptedModel
from .._log.records import (
    ActionResult,
    ApprovalRequest,
    Decision,
    GuardCheck,
    Intent,
    ModelCallResult,
    Record,
    Resolution,
    RunFinished,
    RunStarted,
    StepCompleted,
    args_digest,
)
from .._log.store_port import Store
from .._run.agent import Agent
from .._run.tools import tool

def logical(records: list[Record]) -> list[dict[str, Any]]:
    """Records without their explicitly non-deterministic fields (timestamps)."""
    out = []
    for r in records:
        fields = {name: getattr(r, name) for name in r.__slots__ if name != "at"}  # type: ignore[union-attr]
        fields["record"] = r.TAG
        out.append(fields)
    return out


def sample_run(run_id: str) -> list[Record]:
    return [
        RunStarted(run_id=run_id, goal="contract: ünïcode ✓ \x1b[31m", target=None, config={"max_steps": 3}),
        Intent(kind="model_call", step=1, attempt=1, result_id="s1-m1"),
        ModelCallResult(
            result_id="s1-m1",
            output={"text": "thinking", "tool_call": {"name": "echo", "args": {"text": "hi\n\"q\""}}},
            usage={"input_tokens": 12, "output_tokens": 3},
        ),
        Intent(
            kind="action", step=1, attempt=1, result_id="s1-a1", tool="echo",
            args={"text": "hi\n\"q\""}, replay="never",
            idempotency_key=idempotency_key(run_id, 1, "echo", {"text": "hi\n\"q\""}),
        ),
        Resolution(result_id="s1-a1", outcome="executed", observation="hi", by="op", reason="checked"),
        StepCompleted(step=1, result_id="s1-a1", observation="hi"),
        Intent(kind="model_call", step=2, attempt=1, result_id="s2-m1"),
        ModelCallResult(result_id="s2-m1", output={"text": "done", "tool_call": None}, usage=None),
        StepCompleted(step=2, result_id=None, observation=None),
        RunFinished(reason="final_answer", result="done", steps=2),
    ]


class StopAfter(Store):
    """Wraps a store and stops the run (as a crash would) after step `step` is recorded."""

    def __init__(self, inner: Store, step: int) -> None:
        self.inner = inner
        self.step = step

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def write_run_started(self, record: RunStarted) -> None:
        await self.inner.write_run_started(record)

    async def write_intent(self, run_id: str, record: Intent) -> None:
        await self.inner.write_intent(run_id, record)

    async def write_model_call_result(self, run_id: str, record: ModelCallResult) -> None:
        await self.inner.write_model_call_result(run_id, record)

    async def write_step_completed(self, run_id: str, record: StepCompleted) -> None:
        await self.inner.write_step_completed(run_id, record)
        if record.step == self.step:
            raise Stopped

    async def write_run_finished(self, run_id: str, record: RunFinished) -> None:
        await self.inner.write_run_finished(run_id, record)

    async def write_resolution(self, run_id: str, record: Resolution) -> None:
        await self.inner.write_resolution(run_id, record)

    async def read_log(self, run_id: str) -> Any:
        return await self.inner.read_log(run_id)


class ContractViolation(AssertionError):
    """A store broke a property of the storage contract."""


async def make_store(factory: Any) -> Any:
    """The store a contract property tests: `factory()`, awaited when it is a coroutine."""
    store = factory()
    if inspect.iscoroutine(store):
        store = await store
    return store


class Stopped(BaseException):
    """Stands for a crash: not an Exception, so nothing in the loop records it."""


def contract_agent(effects: list[str]) -> Agent:
    @tool
    def write(name: str) -> str:
        """Record a side effect."""
        effects.append(name)
        return f"wrote {name}"

    @tool(replay="safe")
    def read(name: str) -> str:
        """Read something."""
        return f"read {name}"

    script = [
        {"tool": "read", "args": {"name": "a"}},
        {"tool": "write", "args": {"name": "b"}},
        {"tool": "read", "args": {"name": "c"}},
        {"tool": "write", "args": {"name": "d"}},
        {"final": "all done"},
    ]
    return Agent(model=ScriptedModel(script), tools=[read, write], max_steps=10)


class CrashIn(BaseException):
    """A crash inside a tool, after its side effect."""


def guarded_run(run_id: str) -> list[Record]:
    guards = {"precondition": True, "verify": True, "rollback": "undo", "reconcile": False, "irreversible": False}
    call = {"name": "pay", "args": {"amount": 5}}
    key = idempotency_key(run_id, 1, "pay", {"amount": 5})  # the keys a writer derives (rule 36)
    return [
        RunStarted(run_id=run_id, goal="guarded", config={"max_steps": 2, "tools": [
            {"name": "pay", "replay": "never", "guards": guards}]}),
        Intent(kind="model_call", step=1, attempt=1, result_id="s1-m1"),
        ModelCallResult(result_id="s1-m1", output={"text": None, "tool_call": call}),
        Intent(kind="action", step=1, attempt=1, result_id="s1-a1", tool="pay", args={"amount": 5},
               replay="never", idempotency_key=key),
        GuardCheck(result_id="s1-a1", guard="precondition", passed=True),
        ActionResult(result_id="s1-a1", observation="paid 5"),
        GuardCheck(result_id="s1-a1", guard="verify", passed=False, reason="ledger: 4", rollback="undo"),
        Intent(kind="rollback", step=1, attempt=1, result_id="s1-r1", tool="pay", args={"amount": 5},
               replay="never", idempotency_key=rollback_key(key)),
        ActionResult(result_id="s1-r1", observation="undone"),
        StepCompleted(step=1, result_id="s1-a1", observation="rolled back", is_error=True),
    ]


def approved_run(run_id: str) -> list[Record]:
    args = {"amount": 500}
    sha = args_digest(args)
    call = {"name": "pay", "args": args}
    key = idempotency_key(run_id, 1, "pay", args)  # the request's, which its edited action keeps
    return [
        RunStarted(run_id=run_id, goal="approved", config={"max_steps": 2, "tools": [
            {"name": "pay", "replay": "never", "approval": "required"}]}),
        Intent(kind="model_call", step=1, attempt=1, result_id="s1-m1"),
        ModelCallResult(result_id="s1-m1", output={"text": None, "tool_call": call}),
        ApprovalRequest(result_id="s1-a1", step=1, kind="approval", tool="pay", args=args, args_sha256=sha,
                        idempotency_key=key, reason="the tool requires approval"),
        Decision(id="s1-a1", decision="approved", by="ann@host", request_sha256=sha,
                 args_sha256=args_digest({"amount": 400}), reason="cap", args={"amount": 400}),
        Intent(kind="action", step=1, attempt=1, result_id="s1-a1", tool="pay", args={"amount": 400},
               replay="never", idempotency_key=key),
        StepCompleted(step=1, result_id="s1-a1", observation="paid 400"),
    ]
