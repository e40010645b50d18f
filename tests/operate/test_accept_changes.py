"""Accepting a changed checkpoint on the record without resuming (`accept_changes`, the console's form).

Real files and a real JSONL store; the agent is the console's (its `pay` waits for
approval, its `note` keeps a product), loaded from its file as `polyloop resume` loads it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.pg_schema import own_schema

from polyloop import (
    CheckpointError, InvalidInputError, JsonlStore, NeedsOperatorError, RunActiveError, approve, resume_run, run_target,
)
from polyloop._log.records import CheckpointAccepted
from polyloop._operate.accept import accept_changes, changes_sha256, pending_changes
from polyloop.stores import open_store

TARGET = f"{Path(__file__).resolve().parent.parent / 'serve' / 'console_agents.py'}:agent"
PAY = {"tool": "pay", "args": {"to": "acme", "amount": 250}}


@pytest.fixture(autouse=True)
def _ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONSOLE_LEDGER", str(tmp_path / "ledger.txt"))


async def _approved(store: JsonlStore, run_id: str, orders: Path) -> None:
    """A run of the input file `orders` (written for it) that stopped for the approval of `pay`,
    approved: resume would run it next."""
    orders.write_text("1042,250\n")
    with pytest.raises(NeedsOperatorError):
        await run_target(TARGET, goal=json.dumps(PAY), store=store, run_id=run_id, inputs={"orders": str(orders)})
    await approve(store, run_id, "s1-a1", reason="checked", by="bob")


async def test_an_acceptance_is_recorded_and_a_plain_resume_then_finishes(tmp_path: Path) -> None:
    store, orders = JsonlStore(tmp_path / "runs"), tmp_path / "orders.csv"
    await _approved(store, "a1", orders)
    orders.write_text("1042,2500\n")
    with pytest.raises(CheckpointError, match="input 'orders'"):
        await resume_run("a1", store=store)
    log = await store.read_log("a1")
    settled = await accept_changes(store, "a1", reason="the corrected orders", by="ann", seen=len(log))
    record = settled.records[-1]
    assert isinstance(record, CheckpointAccepted)
    assert (record.by, record.reason) == ("ann", "the corrected orders")
    assert [(d["what"], d["name"]) for d in record.differences] == [("input", "orders")]
    assert record.differences[0]["now"] != record.differences[0]["recorded"]
    assert list(await store.read_log("a1")) == [*log, record]  # the record, nothing else: nothing ran
    result = await resume_run("a1", store=store)  # no accept_changes: the record is honoured
    assert result.text == "the tool said: paid 250 to acme ()"
    after = await store.read_log("a1")
    assert [r.TAG for r in after].count("checkpoint_accepted") == 1
    assert (tmp_path / "ledger.txt").read_text() == "paid 250 to acme\n"


NOTE_THEN_PAY = f"""
import sys
sys.path.insert(0, {str(Path(__file__).resolve().parent.parent / 'serve')!r})
from console_agents import note, pay
from polyloop import Agent, ScriptedModel

def agent():
    return Agent(model=ScriptedModel([{{"tool": "note", "args": {{"text": "v1"}}}},
                                      {{"tool": "pay", "args": {{"to": "acme", "amount": 250}}}}, {{"final": "done"}}]),
                 tools=[note, pay])
"""


async def test_a_changed_product_is_accepted_as_resume_would_accept_it(tmp_path: Path) -> None:
    store, agent = JsonlStore(tmp_path / "runs"), tmp_path / "note_then_pay.py"
    agent.write_text(NOTE_THEN_PAY)
    with pytest.raises(NeedsOperatorError):  # step 1 keeps a product, step 2 waits for approval
        await run_target(f"{agent}:agent", goal="g", store=store, run_id="a2")
    await approve(store, "a2", "s2-a1", reason="checked", by="bob")
    (tmp_path / "runs" / "a2.artifacts" / "note.txt").write_text("v2")
    with pytest.raises(CheckpointError, match="product 'note.txt'"):
        await resume_run("a2", store=store)
    pending = await pending_changes(store, "a2")
    assert [(d["what"], d["name"]) for d in pending] == [("product", "note.txt")]
    settled = await accept_changes(store, "a2", reason="edited by hand", by="ann", expect_sha256=changes_sha256(pending))
    assert settled.records[-1].differences == pending
    assert (await resume_run("a2", store=store)).reason == "final_answer"


async def test_nothing_to_accept_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    store, orders = JsonlStore(tmp_path / "runs"), tmp_path / "orders.csv"
    await _approved(store, "a3", orders)
    before = await store.read_log("a3")
    with pytest.raises(CheckpointError, match="cannot accept the changes of run 'a3': nothing to accept"):
        await accept_changes(store, "a3", reason="just in case", by="ann")
    assert await store.read_log("a3") == before


async def test_a_page_drawn_before_another_acceptance_is_stale(tmp_path: Path) -> None:
    store, orders = JsonlStore(tmp_path / "runs"), tmp_path / "orders.csv"
    await _approved(store, "a4", orders)
    orders.write_text("1042,2500\n")
    seen = len(await store.read_log("a4"))
    await accept_changes(store, "a4", reason="bob checked it", by="bob")  # another tab, another operator
    orders.write_text("1042,9999\n")  # and it changed again: the page showed an older change
    before = await store.read_log("a4")
    with pytest.raises(CheckpointError, match=rf"since the page was drawn \(record {seen}\), record {seen} was "
                                              r"written: changes were accepted by bob at"):
        await accept_changes(store, "a4", reason="ann checked it", by="ann", seen=seen)
    with pytest.raises(CheckpointError, match=r"page's log position -1 is not a position"):
        await accept_changes(store, "a4", reason="ann checked it", by="ann", seen=-1)
    assert await store.read_log("a4") == before


async def test_changes_other_than_the_ones_shown_are_refused(tmp_path: Path) -> None:
    store, orders = JsonlStore(tmp_path / "runs"), tmp_path / "orders.csv"
    await _approved(store, "a5", orders)
    orders.write_text("1042,2500\n")
    shown = changes_sha256(await pending_changes(store, "a5"))
    orders.write_text("1042,9999\n")
    before = await store.read_log("a5")
    with pytest.raises(CheckpointError, match="not the ones the page showed"):
        await accept_changes(store, "a5", reason="checked", by="ann", expect_sha256=shown)
    assert await store.read_log("a5") == before


async def test_a_run_a_live_process_holds_is_refused(tmp_path: Path) -> None:
    store, orders = JsonlStore(tmp_path / "runs"), tmp_path / "orders.csv"
    await _approved(store, "a6", orders)
    orders.write_text("1042,2500\n")
    before = await store.read_log("a6")
    holder = subprocess.Popen(  # another process holds the run (as a resume or a worker does)
        [sys.executable, "-c", "import asyncio, sys\nfrom polyloop import JsonlStore\nasync def main():\n"
         f"    async with JsonlStore({str(tmp_path / 'runs')!r}).lock('a6'):\n"
         "        print('held', flush=True)\n        sys.stdin.read()\nasyncio.run(main())"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(RunActiveError):
            await accept_changes(store, "a6", reason="checked", by="ann")
    finally:
        holder.communicate("", timeout=30)
    assert await store.read_log("a6") == before
    assert (await accept_changes(store, "a6", reason="checked", by="ann")).records[-1].by == "ann"


@pytest.mark.parametrize("reason", ["", "  \t", "\u200b", "TEXT", "REASON"])
async def test_a_blank_or_placeholder_reason_is_refused_before_anything_is_read(tmp_path: Path, reason: str) -> None:
    with pytest.raises(InvalidInputError, match="the reason"):
        await accept_changes(JsonlStore(tmp_path / "runs"), "never-read", reason=reason, by="ann")


async def test_a_finished_run_has_nothing_to_accept(tmp_path: Path) -> None:
    store, orders = JsonlStore(tmp_path / "runs"), tmp_path / "orders.csv"
    await _approved(store, "a7", orders)
    await resume_run("a7", store=store)
    orders.write_text("1042,2500\n")
    with pytest.raises(CheckpointError, match=r"the run has finished \(final_answer\)"):
        await accept_changes(store, "a7", reason="late", by="ann")


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A schema of this test's own on the test server, dropped at the end."""
    with own_schema("polyloop_accept") as url:
        yield url


async def test_on_postgresql_an_acceptance_is_recorded_a_held_run_refused_and_a_plain_resume_finishes(
    pg_url: str, tmp_path: Path
) -> None:
    store, orders = open_store(pg_url), tmp_path / "orders.csv"
    try:
        await _approved(store, "pg-a1", orders)
        orders.write_text("1042,2500\n")
        seen = len(await store.read_log("pg-a1"))
        other = open_store(pg_url)  # another process's store: its hold is a lease in the database
        try:
            async with other.lock("pg-a1"):
                with pytest.raises(RunActiveError):
                    await accept_changes(store, "pg-a1", reason="checked", by="ann", seen=seen)
        finally:
            await other.aclose()
        settled = await accept_changes(store, "pg-a1", reason="checked", by="ann", seen=seen)
        assert [(d["what"], d["name"]) for d in settled.records[-1].differences] == [("input", "orders")]
        assert (await resume_run("pg-a1", store=store)).text == "the tool said: paid 250 to acme ()"
    finally:
        await store.aclose()
