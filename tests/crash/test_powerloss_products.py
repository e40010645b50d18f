"""Power loss during product writes: every crash state the file-system model allows, checked.

A run of a three-product pipeline (the first write creates the run's
product folder, a later one replaces a product and supersedes its
reference) is recorded once through the store's disk seam; the explorer
lists the trees a power cut after any operation may leave (powerloss/model.py).
In every state:

* a product visible under its name is one whole version, never a prefix,
  NULs or a mix; a temporary file is never a product;
* a product acknowledged to the tool (its `write` returned) is there, as
  that version or a later one;
* `verify` finds the log not corrupt and no product missing or altered
  (`unsettled` — a product replaced by an action whose outcome the log
  does not hold — is allowed: the log cannot tell);
* a resume reaches the scripted end, and then the products and their
  references agree (`verify`: ok, every product ok).

The full exploration: `POLYLOOP_POWERLOSS=full` (more states per point, all checked).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import shutil
import tempfile
from pathlib import Path

from polyloop import Agent, JsonlStore, ScriptedModel, ToolContext, tool, verify_file
from powerloss.check import scratch_root
from powerloss.explore import Tally, explore
from powerloss.recorder import RecordingDisk
from powerloss.scenarios import after_reboot

FULL = os.environ.get("POLYLOOP_POWERLOSS") == "full"
PER_POINT = 40 if FULL else 6
CHECKED = None if FULL else 150
RUN = "pipe"
V1 = b'{"parties": ["a", "b"]}' * 40
V2 = b'{"parties": ["a", "b"], "v": 2}' * 40
SUMMARY = b"summary of v1"
VERSIONS = {"doc.json": [V1, V2], "summary.txt": [SUMMARY]}


def agent(disk: RecordingDisk | None = None) -> Agent:
    def acked(ref):
        if disk is not None:
            disk.mark("product", name=ref.name, sha256=ref.sha256)
        return ref

    @tool(replay="safe")
    def extract(ctx: ToolContext):
        """Extract."""
        return acked(ctx.artifacts.write("doc.json", V1))

    @tool(replay="safe")
    def summarize(ctx: ToolContext):
        """Summarize."""
        ctx.artifacts.read("doc.json")
        return acked(ctx.artifacts.write("summary.txt", SUMMARY))

    @tool(replay="safe")
    def reextract(ctx: ToolContext):
        """Extract again."""
        return acked(ctx.artifacts.write("doc.json", V2))

    script = [{"tool": "extract", "args": {}}, {"tool": "summarize", "args": {}},
              {"tool": "reextract", "args": {}}, {"final": "done"}]
    return Agent(model=ScriptedModel(script), tools=[extract, summarize, reextract])


async def _record(root: Path) -> RecordingDisk:
    disk = RecordingDisk(root, label="products")
    async with JsonlStore(root / "runs", _disk=disk) as store:
        result = await agent(disk).run("keep products", run_id=RUN, store=store)
    assert result.text == "done"
    return disk


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def _check(found, scratch: Path) -> list[str]:
    problems = []
    after_reboot(found.state).materialise(str(scratch))
    runs = scratch / "runs"
    folder = runs / f"{RUN}.artifacts"
    visible = {p.name: p.read_bytes() for p in folder.iterdir() if not p.name.startswith(".")} \
        if folder.is_dir() else {}
    for name, data in visible.items():
        if data not in VERSIONS.get(name, []):
            problems.append(f"{name} is not a whole version ({len(data)} bytes)")
    for mark in found.trace.marks_before(found.point):
        if mark["kind"] == "product":
            later = [_sha(v) for v in VERSIONS[mark["name"]]]
            now = visible.get(mark["name"])
            if now is None or _sha(now) not in later[later.index(mark["sha256"]):]:
                problems.append(f"acknowledged product {mark['name']} is lost or rolled back")
    log = runs / f"{RUN}.jsonl"
    if not log.exists():
        return problems
    verdict = verify_file(log)
    if verdict.status in ("corrupt", "bad_product"):
        problems.append(f"verify after the cut: {verdict.status} {verdict.problems}")
        return problems
    try:
        async with JsonlStore(runs) as store:
            result = await agent().run("keep products", run_id=RUN, store=store)
        if result.text != "done":
            problems.append(f"resume ended {result.reason}")
    except Exception as exc:  # reported as a violation of this state
        problems.append(f"resume raised {type(exc).__name__}: {exc}")
        return problems
    after = verify_file(log)
    if after.status != "ok" or [(c.ref.name, c.state) for c in after.products] != [
        ("summary.txt", "ok"), ("doc.json", "ok")
    ]:
        problems.append(f"after resume: {after.status} {[(c.ref.name, c.state) for c in after.products]}")
    return problems


def test_every_power_cut_during_product_writes_leaves_whole_products_and_a_consistent_resume(tmp_path):
    disk = asyncio.run(_record(tmp_path / "recorded"))
    tally = Tally()
    found = list(explore(disk.trace, per_point=PER_POINT, seed=12, tally=tally))
    if CHECKED is not None and len(found) > CHECKED:
        found = random.Random(12).sample(found, CHECKED)
    failures = []
    for f in found:
        scratch = Path(tempfile.mkdtemp(prefix="powerloss-products-", dir=scratch_root()))
        try:
            problems = asyncio.run(_check(f, scratch))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        if problems:
            failures.append(f"after op {f.point}: {problems}")
    tally.checked += len(found)
    print(f"\nproducts: {tally}")
    assert not failures, "\n".join(failures[:10])
    # The trace holds both writes' renames and the folder creation: the window the test is about.
    kinds = [op.kind for op in disk.trace.ops]
    assert kinds.count("rename") == 3 and "mkdir" in kinds
