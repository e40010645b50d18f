"""Intermediate products: ctx.artifacts, the `artifact` record, and the check before a resume."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import os

import orjson
import pytest

from polyloop import (
    Agent,
    ArtifactRef,
    CheckpointError,
    InvalidInputError,
    JsonlStore,
    ScriptedModel,
    ToolContext,
    classify,
    inspect_run,
    tool,
)
from polyloop._log.records import Artifact
from polyloop._run.observe import observation_text
from polyloop.testing import MemoryStore


class Crash(BaseException):
    """Stands for the process dying: nothing in the loop may record it."""


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make(*, crash_after_write: bool = False, replay: str = "never", seen: list | None = None) -> Agent:
    seen = seen if seen is not None else []

    @tool(replay=replay)
    def extract(doc: str, ctx: ToolContext) -> ArtifactRef:
        """Extract a document into a product."""
        ref = ctx.artifacts.write("extract.json", orjson.dumps({"doc": doc}))
        if crash_after_write:
            raise Crash
        return ref

    @tool(replay="safe")
    async def summarize(ctx: ToolContext) -> str:
        """Summarize the product."""
        data = await ctx.artifacts.aread("extract.json")
        seen.append(data)
        ref = await ctx.artifacts.awrite("summary.txt", "short: " + data.decode())
        return f"summary {ref.sha256[:8]}"

    script = [
        {"tool": "extract", "args": {"doc": "contract"}},
        {"tool": "summarize", "args": {}},
        {"final": "done"},
    ]
    return Agent(model=ScriptedModel(script), tools=[extract, summarize])


def test_a_product_is_written_referenced_and_read_back(tmp_path):
    seen: list[bytes] = []
    store = JsonlStore(tmp_path)
    result = asyncio.run(make(seen=seen).run("go", run_id="r1", store=store))
    assert result.text == "done"
    content = orjson.dumps({"doc": "contract"})
    assert (tmp_path / "r1.artifacts" / "extract.json").read_bytes() == content
    assert seen == [content]
    records = asyncio.run(store.read_log("r1"))
    refs = [r for r in records if isinstance(r, Artifact)]
    assert [(r.result_id, r.name, r.path, r.size, r.sha256) for r in refs] == [
        ("s1-a1", "extract.json", "r1.artifacts/extract.json", len(content), sha(content)),
        ("s2-a1", "summary.txt", "r1.artifacts/summary.txt", len(b"short: ") + len(content),
         sha(b"short: " + content)),
    ]
    # The observation is the reference as JSON, never the content.
    step1 = classify(records).steps[0].completed
    assert orjson.loads(step1.observation) == {
        "name": "extract.json", "path": "r1.artifacts/extract.json", "size": len(content), "sha256": sha(content)
    }
    # No temporary file is left beside the products.
    assert sorted(os.listdir(tmp_path / "r1.artifacts")) == ["extract.json", "summary.txt"]


def test_observation_text_serializes_a_ref_alone_and_nested():
    ref = ArtifactRef("a.bin", "r.artifacts/a.bin", 3, "0" * 64)
    assert orjson.loads(observation_text(ref)) == ref.to_json()
    assert orjson.loads(observation_text({"out": [ref]})) == {"out": [ref.to_json()]}


class DiesAt:
    """A model that stands for the process dying at its `n`-th call."""

    def __init__(self, model, n):
        self.model, self.n, self.calls = model, n, 0

    def describe(self):  # the same model as far as the checkpoint goes: only the process dies
        return self.model.describe()

    async def complete(self, messages, tools):
        self.calls += 1
        if self.calls == self.n:
            raise Crash
        return await self.model.complete(messages, tools)


def stopped_after_step_one(store, run_id: str) -> None:
    """A run that completed step 1 (which wrote extract.json) and died at step 2's model call."""
    agent = make()
    agent.model = DiesAt(agent.model, 2)
    with pytest.raises(Crash):
        asyncio.run(agent.run("go", run_id=run_id, store=store))


@pytest.mark.parametrize("store_kind", ["jsonl", "memory"])
def test_an_altered_product_refuses_the_resume_before_anything_runs(tmp_path, store_kind):
    store = JsonlStore(tmp_path) if store_kind == "jsonl" else MemoryStore()
    stopped_after_step_one(store, "r2")
    path = "r2.artifacts/extract.json"
    original = asyncio.run(store.get_product("r2", "extract.json"))
    flipped = bytes([original[0] ^ 1]) + original[1:]
    asyncio.run(store.put_product("r2", "extract.json", flipped))
    before = len(asyncio.run(store.read_log("r2")))
    with pytest.raises(CheckpointError) as err:
        asyncio.run(make().run("go", run_id="r2", store=store))
    assert "'extract.json'" in str(err.value) and path in str(err.value) and "altered" in str(err.value)
    assert "new run id" in str(err.value) and "--accept-changes" in str(err.value)
    assert err.value.differences == (
        {
            "what": "product",
            "name": "extract.json",
            "recorded": {"path": path, "size": len(original), "sha256": sha(original)},
            "now": {"size": len(flipped), "sha256": sha(flipped)},
        },
    )
    assert len(asyncio.run(store.read_log("r2"))) == before  # nothing written, nothing ran
    # Put the recorded bytes back: the run resumes and finishes.
    asyncio.run(store.put_product("r2", "extract.json", original))
    assert asyncio.run(make().run("go", run_id="r2", store=store)).text == "done"


def test_a_missing_product_refuses_the_resume(tmp_path):
    store = JsonlStore(tmp_path)
    stopped_after_step_one(store, "r3")
    os.unlink(tmp_path / "r3.artifacts" / "extract.json")
    with pytest.raises(CheckpointError) as err:
        asyncio.run(make().run("go", run_id="r3", store=store))
    assert "'extract.json' (r3.artifacts/extract.json) is missing" in str(err.value)
    assert err.value.differences[0]["now"] is None


def test_a_finished_run_is_returned_as_recorded_even_without_its_products(tmp_path):
    store = JsonlStore(tmp_path)
    asyncio.run(make().run("go", run_id="r4", store=store))
    os.unlink(tmp_path / "r4.artifacts" / "extract.json")
    result = asyncio.run(make().run("go", run_id="r4", store=store))
    assert result.already_finished and result.text == "done"


def _interrupted_replacement(store, run_id: str, *, replay_rewrites: bool) -> Agent:
    """Step 2's tool replaced extract.json and died before recording it; the agent to resume with."""

    @tool
    def extract(doc: str, ctx: ToolContext) -> ArtifactRef:
        """Extract a document into a product."""
        return ctx.artifacts.write("extract.json", orjson.dumps({"doc": doc}))

    @tool(replay="safe")
    def summarize(ctx: ToolContext) -> str:
        """Summarize the product."""
        if ctx.attempt == 1:
            asyncio.run(store.put_product(run_id, "extract.json", b"rewritten"))  # the write, not its record
            raise Crash
        if replay_rewrites:
            return ctx.artifacts.write("extract.json", b"rewritten").sha256
        return ctx.artifacts.read("extract.json").decode()

    agent = Agent(model=make().model, tools=[extract, summarize])
    model = agent.model
    agent.model = DiesAt(model, 2)  # step 1 wrote extract.json; the process dies at step 2's model call
    with pytest.raises(Crash):
        asyncio.run(agent.run("go", run_id=run_id, store=store))
    agent.model = model
    with pytest.raises(Crash):
        asyncio.run(agent.run("go", run_id=run_id, store=store))
    return agent


def test_a_product_replaced_by_the_interrupted_action_is_unsettled_and_its_replay_settles_it(tmp_path):
    # A second write of a name replaces the product before its reference is
    # recorded: a crash in between leaves new bytes under the old reference.
    # The action has no outcome yet, so the log cannot tell: not refused.
    store = JsonlStore(tmp_path)
    agent = _interrupted_replacement(store, "r5", replay_rewrites=True)
    report = asyncio.run(inspect_run(store, "r5"))
    assert [(a.ref.name, a.state) for a in report.artifacts] == [("extract.json", "unsettled")]
    assert report.status == "resumable"
    assert asyncio.run(agent.run("go", run_id="r5", store=store)).text == "done"
    report = asyncio.run(inspect_run(store, "r5"))
    assert [(a.ref.name, a.state, a.ref.result_id) for a in report.artifacts] == [("extract.json", "ok", "s2-a2")]


def test_an_unsettled_product_the_replay_leaves_altered_stops_the_run_after_that_step(tmp_path):
    store = JsonlStore(tmp_path)
    agent = _interrupted_replacement(store, "r9", replay_rewrites=False)
    with pytest.raises(CheckpointError, match=r"run 'r9' stops after step 2: product 'extract.json'"):
        asyncio.run(agent.run("go", run_id="r9", store=store))
    verdict = classify(asyncio.run(store.read_log("r9")))
    step2 = verdict.steps[1].completed
    # The replay read the product: verified against the log, it was refused (the tool's error), never used.
    assert step2.is_error and "ArtifactError" in step2.observation and "altered" in step2.observation
    assert verdict.finished is None and len(verdict.steps) == 2  # nothing ran after the step
    with pytest.raises(CheckpointError, match="cannot resume"):  # and a resume refuses before anything runs
        asyncio.run(agent.run("go", run_id="r9", store=store))


def test_names_are_checked_like_run_ids(tmp_path):
    store = JsonlStore(tmp_path)
    for bad in ["../x", "a/b", ".hidden", "-x", "", "x" * 201, "é"]:
        with pytest.raises(InvalidInputError):
            asyncio.run(store.put_product("r", bad, b"x"))
    assert not (tmp_path / "x").exists()


def test_a_bad_name_or_data_is_the_tools_error_observation(tmp_path):
    @tool
    def bad(kind: str, ctx: ToolContext) -> str:
        if kind == "name":
            ctx.artifacts.write("../escape", b"x")
        elif kind == "data":
            ctx.artifacts.write("ok", 42)  # type: ignore[arg-type]
        else:
            ctx.artifacts.read("never-written")
        return "unreachable"

    script = [{"tool": "bad", "args": {"kind": k}} for k in ("name", "data", "read")] + [{"final": "x"}]
    store = JsonlStore(tmp_path)
    asyncio.run(Agent(model=ScriptedModel(script), tools=[bad]).run("go", run_id="r6", store=store))
    steps = classify(asyncio.run(store.read_log("r6"))).steps
    assert "InvalidInputError: invalid product name '../escape'" in steps[0].completed.observation
    assert "TypeError: a product is bytes or str, not int" in steps[1].completed.observation
    assert "ArtifactError: run 'r6' has no product 'never-written'" in steps[2].completed.observation
    assert not (tmp_path / "escape").exists()


class NoProducts(MemoryStore):
    capabilities = dataclasses.replace(MemoryStore.capabilities, artifacts=False)
    put_product = get_product = write_artifact = None  # type: ignore[assignment]


def test_a_store_without_the_capability_fails_the_write_clearly():
    store = NoProducts()
    assert asyncio.run(make().run("go", run_id="r7", store=store)).text == "done"
    steps = classify(asyncio.run(store.read_log("r7"))).steps
    assert steps[0].completed.is_error
    assert "StoreError: cannot store product 'extract.json': NoProducts keeps no products" in (
        steps[0].completed.observation
    )


def test_sync_write_from_the_event_loop_is_refused_not_deadlocked(tmp_path):
    @tool
    async def wrong(ctx: ToolContext) -> str:
        ctx.artifacts.write("x", b"x")
        return "unreachable"

    store = JsonlStore(tmp_path)
    script = [{"tool": "wrong", "args": {}}, {"final": "x"}]
    asyncio.run(Agent(model=ScriptedModel(script), tools=[wrong]).run("go", run_id="r8", store=store))
    obs = classify(asyncio.run(store.read_log("r8"))).steps[0].completed.observation
    assert "RuntimeError" in obs and "awrite" in obs


def test_a_context_built_by_hand_has_no_products():
    ctx = ToolContext("r", 1, 1, "s1-a1", "k")
    with pytest.raises(RuntimeError, match="belongs to no run"):
        ctx.artifacts.write("x", b"x")


def test_a_guarded_tool_resumed_before_its_precondition_keeps_its_product(tmp_path):
    calls = []

    @tool
    def publish(page: str, ctx: ToolContext) -> ArtifactRef:
        """Publish a page, keeping what was published."""
        return ctx.artifacts.write(f"{page}.html", b"<h1>hi</h1>")

    @publish.precondition
    def _(args, ctx):
        calls.append(ctx.attempt)
        if len(calls) == 1:
            raise Crash  # the process dies after the intent, before the precondition's record
        return True

    script = [{"tool": "publish", "args": {"page": "home"}}, {"final": "ok"}]
    store = JsonlStore(tmp_path)
    agent = Agent(model=ScriptedModel(script), tools=[publish])
    with pytest.raises(Crash):
        asyncio.run(agent.run("go", run_id="g1", store=store))
    assert asyncio.run(agent.run("go", run_id="g1", store=store)).text == "ok"
    report = asyncio.run(inspect_run(store, "g1"))
    assert [(a.ref.name, a.state, a.ref.result_id) for a in report.artifacts] == [("home.html", "ok", "s1-a1")]


def test_an_altered_product_is_accepted_on_the_record_and_later_resumes_compare_against_it(tmp_path):
    store = MemoryStore()
    stopped_after_step_one(store, "r7")
    original = asyncio.run(store.get_product("r7", "extract.json"))
    changed = original.replace(b"contract", b"contracT")
    asyncio.run(store.put_product("r7", "extract.json", changed))
    with pytest.raises(CheckpointError):
        asyncio.run(make().run("go", run_id="r7", store=store))
    # Accepting it writes exactly the product's difference, then the run goes on, and the tools
    # read the product at the bytes that were accepted.
    seen: list[bytes] = []
    result = asyncio.run(make(seen=seen).run("go", run_id="r7", store=store, accept_changes=True,
                                             reason="fixed a typo by hand"))
    assert result.text == "done" and seen == [changed]
    records = asyncio.run(store.read_log("r7"))
    accepted = [r for r in records if r.TAG == "checkpoint_accepted"]
    assert len(accepted) == 1 and [d["what"] for d in accepted[0].differences] == ["product"]
    assert accepted[0].differences[0]["now"]["sha256"] == sha(changed)


def test_verify_does_not_report_a_product_change_accepted_on_the_record(tmp_path):
    from polyloop import verify_logs

    store = JsonlStore(tmp_path)
    stopped_after_step_one(store, "r8")
    changed = asyncio.run(store.get_product("r8", "extract.json")) + b" "
    asyncio.run(store.put_product("r8", "extract.json", changed))
    assert verify_logs(tmp_path).summary["bad_product"] == 1
    asyncio.run(make().run("go", run_id="r8", store=store, accept_changes=True, reason="checked by hand"))
    assert verify_logs(tmp_path).summary == {"ok": 1, "torn_tail": 0, "corrupt": 0, "bad_product": 0}


def test_an_acceptance_covers_exactly_the_state_it_saw():
    from types import SimpleNamespace

    from polyloop._run.artifacts import judge, refused_artifacts
    from polyloop._log.records import CheckpointAccepted

    ref = Artifact(result_id="s1-a1", name="x", path="r.artifacts/x", size=1, sha256=sha(b"x"))
    gone, fifo = judge(ref, None), judge(ref, None, instead="a FIFO is in its place, not the regular file written")
    other, later, same = judge(ref, b"y"), judge(ref, b"z"), judge(ref, b"x")
    unsettled = judge(ref, b"y", in_flight=True)
    assert (gone.state, fifo.state, other.state, same.state, unsettled.state) == (
        "missing", "missing", "altered", "ok", "unsettled"
    )
    nothing = SimpleNamespace(accepted=[])
    assert refused_artifacts([gone, fifo, other, same, unsettled], nothing) == [gone, fifo, other]
    assert refused_artifacts([unsettled], nothing, unsettled=True) == [unsettled]
    # Accepted as missing: absent or not a regular file is covered, bytes that come back are a new change.
    walker = SimpleNamespace(accepted=[CheckpointAccepted(differences=[gone.difference()], reason="r", by="me")])
    assert refused_artifacts([gone, fifo, other], walker) == [other]
    # Accepted at some bytes: those bytes, not others, nor its absence.
    walker = SimpleNamespace(accepted=[CheckpointAccepted(differences=[other.difference()], reason="r", by="me")])
    assert refused_artifacts([other, later, gone], walker) == [later, gone]
    assert refused_artifacts([unsettled], walker, unsettled=True) == []


def test_a_product_that_is_no_longer_a_regular_file_is_a_change_in_the_python_api_too(tmp_path):
    store = JsonlStore(tmp_path)
    stopped_after_step_one(store, "r10")
    product = tmp_path / "r10.artifacts" / "extract.json"
    os.unlink(product)
    product.mkdir()
    said = "product 'extract.json' (r10.artifacts/extract.json) is missing: a directory is in its place"
    report = asyncio.run(inspect_run(store, "r10"))
    assert [(a.state, a.instead) for a in report.artifacts] == [
        ("missing", "a directory is in its place, not the regular file written")
    ]
    assert said in report.reason and report.next.startswith("refuse (exit code 4): run 'r10' cannot resume: " + said)
    with pytest.raises(CheckpointError) as err:  # not a StoreError: a changed checkpoint
        asyncio.run(make().run("go", run_id="r10", store=store))
    assert said in str(err.value) and err.value.differences[0]["now"] is None
    result = asyncio.run(make().run("go", run_id="r10", store=store, accept_changes=True, reason="rebuilt by hand"))
    assert result.text == "done"  # (summarize could not read it: its error observation, then the final answer)


def test_one_acceptance_covers_a_product_only_checked_after_the_interrupted_step(tmp_path):
    store = JsonlStore(tmp_path)
    agent = _interrupted_replacement(store, "r11", replay_rewrites=False)
    result = asyncio.run(agent.run("go", run_id="r11", store=store, accept_changes=True, reason="keep it"))
    assert result.text == "done"
    records = asyncio.run(store.read_log("r11"))
    accepted = [r for r in records if r.TAG == "checkpoint_accepted"]
    assert len(accepted) == 1 and accepted[0].differences[0]["now"]["sha256"] == sha(b"rewritten")
    step2 = classify(records).steps[1].completed
    assert not step2.is_error and step2.observation == "rewritten"  # read at the bytes accepted
