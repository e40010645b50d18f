"""Checkpoint validity (log format 1.2): fingerprints, the differences a resume finds, and the
Python side of refusing and accepting them. Real files on disk; the store is in memory."""

from __future__ import annotations

import asyncio
import textwrap

import pytest

from polyloop import (
    Agent,
    CheckpointAccepted,
    CheckpointError,
    InvalidInputError,
    Resumed,
    RunStarted,
    ScriptedModel,
    load_target,
    tool,
)
from polyloop._run.validity import differences, fingerprint_input, resolved_logic_version
from polyloop.testing import MemoryStore


@tool(replay="safe")
def look(x: int) -> str:
    """Look at x."""
    return f"saw {x}"


SCRIPT = [{"tool": "look", "args": {"x": 1}}, {"tool": "look", "args": {"x": 2}}, {"final": "done"}]


def make(outputs=SCRIPT, **kw):
    kw.setdefault("logic_version", "1")
    return Agent(model=ScriptedModel(outputs), tools=kw.pop("tools", [look]), **kw)


def started(agent, inputs=None):
    return RunStarted(run_id="r", goal="g", config=agent.config(inputs=inputs))


# -- fingerprints ---------------------------------------------------------------------------


def test_a_directory_hash_covers_relative_paths_and_contents_not_where_it_lives(tmp_path):
    for name, order in (("one", ["a.txt", "sub/b.txt"]), ("two", ["sub/b.txt", "a.txt"])):
        for rel in order:
            p = tmp_path / name / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(f"content of {rel}")
    one, two = fingerprint_input("d", tmp_path / "one"), fingerprint_input("d", tmp_path / "two")
    assert one["kind"] == "directory" and one["sha256"] == two["sha256"]
    (tmp_path / "two" / "sub" / "b.txt").rename(tmp_path / "two" / "sub" / "c.txt")
    assert fingerprint_input("d", tmp_path / "two")["sha256"] != one["sha256"]


def test_files_and_bytes_hash_their_contents(tmp_path):
    f = tmp_path / "f.bin"
    f.write_bytes(b"abc")
    assert fingerprint_input("f", f)["sha256"] == fingerprint_input("b", b"abc")["sha256"]
    assert fingerprint_input("b", b"abc")["path"] is None
    assert fingerprint_input("f", str(f))["path"] == str(f.resolve())


def test_an_unreadable_input_refuses_a_new_run_before_anything_is_written(tmp_path):
    store = MemoryStore()
    with pytest.raises(InvalidInputError, match="'contract' cannot be read"):
        asyncio.run(make().run("g", run_id="r", store=store, inputs={"contract": tmp_path / "missing"}))
    assert store.run_ids() == []


# -- differences ----------------------------------------------------------------------------


def test_nothing_changed_means_no_difference(tmp_path):
    (tmp_path / "in.txt").write_text("v1")
    agent = make()
    assert differences(started(agent, {"in": tmp_path / "in.txt"}), [], make()) == []


def test_each_change_is_named_with_its_old_and_new_value(tmp_path):
    f = tmp_path / "in.txt"
    f.write_text("v1")
    start = started(make(system="be brief"), {"in": f})
    f.write_text("v2")

    @tool(replay="never")  # the same tool with another replay policy
    def look(x: int) -> str:
        """Look at x."""
        return ""

    now = make(logic_version="2", system="be thorough", tools=[look])
    diffs = differences(start, [], now)
    named = {(d["what"], d["name"]) for d in diffs}
    assert named == {("logic_version", ""), ("config", "system"), ("config", "tool look"), ("input", "in")}
    version = next(d for d in diffs if d["what"] == "logic_version")
    assert (version["recorded"], version["now"]) == ("1", "2")
    inp = next(d for d in diffs if d["what"] == "input")
    assert inp["recorded"] != inp["now"] and inp["path"] == str(f.resolve())


def test_a_missing_input_and_inputs_given_on_resume(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("A")
    b.write_text("A")
    start = started(make(), {"in": a})
    assert differences(start, [], make(), inputs={"in": b}) == []  # the same contents elsewhere
    a.unlink()
    (gone,) = differences(start, [], make())
    assert gone["now"] is None and gone["recorded"]
    (extra,) = differences(start, [], make(), inputs={"in": b, "more": b"x"})
    assert (extra["name"], extra["recorded"]) == ("more", None)


def test_a_field_absent_at_the_start_is_not_compared():
    old = RunStarted(run_id="r", goal="g", config={"max_steps": 3, "tools": [{"name": "look", "replay": "safe"}]},
                     schema_version="1.1")
    assert differences(old, [], make(logic_version="9", system="new"), inputs={"x": b"1"}) == []


def test_accepted_changes_are_the_new_reference(tmp_path):
    start = started(make())
    (diff,) = differences(start, [], make(logic_version="2"))
    acc = CheckpointAccepted(differences=[diff], reason="release 2", by="op")
    assert differences(start, [acc], make(logic_version="2")) == []
    assert differences(start, [acc], make(logic_version="1"))[0]["recorded"] == "2"


def test_auto_logic_version_hashes_the_agents_source_files(tmp_path):
    src = tmp_path / "auto_agent.py"
    src.write_text(textwrap.dedent('''
        from polyloop import Agent, ScriptedModel, tool

        @tool(replay="safe")
        def shout(text: str) -> str:
            """Shout."""
            return text.upper()

        def agent():
            return Agent(model=ScriptedModel([{"final": "ok"}]), tools=[shout], logic_version="auto")
    '''))
    agent = load_target(f"{src}:agent")
    first = resolved_logic_version(agent)
    assert first.startswith("auto:") and first == resolved_logic_version(agent)
    src.write_text(src.read_text() + "\n# a change of logic\n")
    assert resolved_logic_version(agent) != first


# -- refusing and accepting, in Python ---------------------------------------------------------


def crashed_run(store, **kw):
    """The log of a run that died right after step 1 completed: a prefix of a whole run's log."""
    whole = MemoryStore()
    asyncio.run(make(**kw).run("g", run_id="r", store=whole))
    started, *rest = asyncio.run(whole.read_log("r"))[:5]

    async def copy():
        await store.write_run_started(started)
        for r in rest:
            await getattr(store, f"write_{r.TAG}")("r", r)

    asyncio.run(copy())
    return len(store.raw("r"))


def test_a_changed_logic_version_refuses_before_anything_is_written():
    store = MemoryStore()
    size = crashed_run(store)
    with pytest.raises(CheckpointError) as info:
        asyncio.run(make(logic_version="2").run(run_id="r", store=store))
    assert "logic version changed from '1' to '2'" in str(info.value)
    assert "--accept-changes" in str(info.value) and "new run id" in str(info.value)
    assert info.value.differences[0]["what"] == "logic_version"
    assert len(store.raw("r")) == size


def test_accepting_writes_who_when_why_and_what_then_continues():
    store = MemoryStore()
    crashed_run(store)
    with pytest.raises(InvalidInputError, match="reason"):
        asyncio.run(make(logic_version="2").run(run_id="r", store=store, accept_changes=True))
    result = asyncio.run(make(logic_version="2").run(
        run_id="r", store=store, accept_changes=True, reason="release 2 fixes step 2", by="alice"))
    assert result.reason == "final_answer"
    records = asyncio.run(store.read_log("r"))
    (acc,) = [r for r in records if isinstance(r, CheckpointAccepted)]
    assert (acc.by, acc.reason) == ("alice", "release 2 fixes step 2")
    assert acc.differences == [{"what": "logic_version", "name": "", "recorded": "1", "now": "2"}]
    assert sum(isinstance(r, Resumed) for r in records) == 1
    assert records.index(acc) < records.index(next(r for r in records if isinstance(r, Resumed)))


def test_a_resume_without_difference_writes_no_acceptance():
    store = MemoryStore()
    crashed_run(store)
    asyncio.run(make().run(run_id="r", store=store, accept_changes=True, reason="just in case"))
    assert not any(isinstance(r, CheckpointAccepted) for r in asyncio.run(store.read_log("r")))


def test_a_log_older_than_1_2_resumes_as_before_with_nothing_compared_or_counted():
    store = MemoryStore()
    whole = MemoryStore()
    asyncio.run(make().run("g", run_id="r", store=whole))
    records = asyncio.run(whole.read_log("r"))[:5]
    old = RunStarted(run_id="r", goal="g", schema_version="1.1", config={
        k: v for k, v in records[0].config.items()
        if k not in ("logic_version", "inputs", "config_hashes", "max_tool_failures", "max_resumes_without_progress")
    })

    async def copy():
        await store.write_run_started(old)
        for r in records[1:]:
            await getattr(store, f"write_{r.TAG}")("r", r)

    asyncio.run(copy())
    # Another logic version, prompt and inputs: a 1.1 log recorded none of them.
    result = asyncio.run(make(logic_version="9", system="new").run(run_id="r", store=store, inputs={"x": b"1"}))
    assert result.reason == "final_answer"
    tags = [r.TAG for r in asyncio.run(store.read_log("r"))]
    assert "resumed" not in tags and "checkpoint_accepted" not in tags
