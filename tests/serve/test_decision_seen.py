"""A decision bound to the log as a person saw it (`seen`): the library check behind the console's forms."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from console_helpers import TARGET

from polyloop import DecisionError, JsonlStore, NeedsOperatorError, ResolutionError, answer, run_target
from polyloop.for_cli import decide, resolve


async def _waiting(store: JsonlStore, run_id: str, tool: str, args: dict[str, object]) -> int:
    with pytest.raises(NeedsOperatorError):
        await run_target(TARGET, goal=json.dumps({"tool": tool, "args": args}), store=store, run_id=run_id)
    return len(await store.read_log(run_id))


async def test_a_decision_on_the_log_as_seen_is_recorded(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    seen = await _waiting(store, "r1", "pay", {"to": "acme", "amount": 1})
    settled = await decide(store, "r1", "s1-a1", "approved", reason="ok", by="ann", seen=seen)
    assert settled.records[-1].decision == "approved"


async def test_a_decision_after_someone_else_decided_says_who_and_writes_nothing(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    seen = await _waiting(store, "r2", "ask_human", {"question": "which?"})
    await answer(store, "r2", "s1-a1", "the first", by="bob")
    before = await store.read_log("r2")
    with pytest.raises(DecisionError, match=r"since the page was drawn \(record 4\), record 4 was written: "
                                            r"it was answered by bob at"):
        await decide(store, "r2", "s1-a1", "answered", reason=None, by="ann", answer="the second", seen=seen)
    assert await store.read_log("r2") == before


async def test_a_log_shorter_than_seen_is_not_the_log_that_was_seen(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    seen = await _waiting(store, "r3", "pay", {"to": "acme", "amount": 1})
    with pytest.raises(DecisionError, match="fewer than the 9 the page was drawn from"):
        await decide(store, "r3", "s1-a1", "denied", reason="no", by="ann", seen=seen + 5)


async def test_a_resolution_on_something_else_than_seen_is_refused(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    seen = await _waiting(store, "r4", "pay", {"to": "acme", "amount": 1})
    await decide(store, "r4", "s1-a1", "denied", reason="no", by="bob")
    with pytest.raises(ResolutionError, match="the run does not wait|since the page was drawn|tool call that waits"):
        await resolve(store, "r4", "s1-a1", executed=True, observation="x", reason="r", by="ann", seen=seen)


async def test_a_decision_on_a_sibling_call_does_not_make_the_form_stale(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    with pytest.raises(NeedsOperatorError):
        await run_target(TARGET, store=store, run_id="r5", goal=json.dumps({"calls": [
            {"tool": "pay", "args": {"to": "a", "amount": 1}}, {"tool": "pay", "args": {"to": "b", "amount": 2}}]}))
    seen = len(await store.read_log("r5"))
    await decide(store, "r5", "s1-c1-a1", "approved", reason="ok", by="bob")
    settled = await decide(store, "r5", "s1-c2-a1", "denied", reason="no", by="ann", seen=seen)
    assert settled.records[-1].by == "ann"


async def test_a_negative_position_is_no_position_in_the_log(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    await _waiting(store, "r6", "pay", {"to": "acme", "amount": 1})
    before = await store.read_log("r6")
    with pytest.raises(DecisionError, match=r"the page's log position -1 is not a position in a log"):
        await decide(store, "r6", "s1-a1", "denied", reason="no", by="ann", seen=-1)
    assert await store.read_log("r6") == before
