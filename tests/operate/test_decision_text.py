"""A person's reason and name, through the library: a blank one is refused by every decision, before anything is read."""

from __future__ import annotations

import asyncio

import pytest

from polyloop import (
    Agent,
    ApprovalRequiredError,
    InvalidInputError,
    ScriptedModel,
    answer,
    approve,
    deny,
    mark_resolved,
    resume_run,
    tool,
)
from polyloop.testing import MemoryStore

BLANKS = ["", "   ", "\t\n", "\x1b\x07", "\u200b\u2066\u202e"]


@tool(approval="required")
def pay(amount: int) -> str:
    return f"paid {amount}"


def waiting() -> MemoryStore:
    """A run that waits for approval of its step 1 call `s1-a1`."""
    store = MemoryStore()
    agent = Agent(model=ScriptedModel([{"tool": "pay", "args": {"amount": 5}}, {"final": "ok"}]), tools=[pay],
                  logic_version="1")
    with pytest.raises(ApprovalRequiredError):
        asyncio.run(agent.run("g", run_id="r", store=store))
    return store


DECISIONS = {
    "approve": lambda store, **kw: approve(store, "r", "s1-a1", **{"reason": "ok", **kw}),
    "deny": lambda store, **kw: deny(store, "r", "s1-a1", **{"reason": "no", **kw}),
    "answer": lambda store, **kw: answer(store, "r", "s1-a1", "blue", **kw),
    "mark_resolved": lambda store, **kw: mark_resolved(store, "r", "s1-a1", executed=False, **kw),
    "resume_run": lambda store, **kw: resume_run("r", store=store, accept_changes=True, **{"reason": "ok", **kw}),
}


@pytest.mark.parametrize("blank", BLANKS)
@pytest.mark.parametrize("field", ["reason", "by"])
@pytest.mark.parametrize("decision", list(DECISIONS))
def test_a_blank_reason_or_name_is_refused_before_anything_is_read_or_written(decision, field, blank):
    store = waiting()
    before = store.raw("r")
    with pytest.raises(InvalidInputError, match="blank") as err:
        asyncio.run(DECISIONS[decision](store, **{field: blank}))
    assert f"--{field}" in str(err.value)
    assert store.raw("r") == before


def test_a_reason_is_required_by_approve_and_deny_and_by_an_acceptance():
    store = waiting()
    for decide in (approve, deny):
        with pytest.raises(InvalidInputError, match="required"):
            asyncio.run(decide(store, "r", "s1-a1", reason=None))  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="accept"):
        asyncio.run(resume_run("r", store=store, accept_crash_loop=True))
