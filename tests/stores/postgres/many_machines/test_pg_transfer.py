"""`export` / `import`: a run moves from one PostgreSQL database to another (through JSONL files) and resumes
there, unknowns and products included; the CLI's documents and exit codes; `archive` keeps products."""

from __future__ import annotations

import asyncio
import hashlib
import sys
import uuid
from pathlib import Path

import pytest

from polyloop import Agent, NeedsOperatorError, ToolContext, mark_resolved, tool, verify_logs
from polyloop._log.model_port import ScriptedModel
from polyloop.for_cli import export_runs, import_runs
from polyloop.stores import JsonlStore, PostgresStore
from polyloop.testing._samples import CrashIn

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from support.cli import polyloop_in_process  # noqa: E402


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def agent_with(calls: list[str]) -> Agent:
    @tool(replay="safe")
    def keep(ctx: ToolContext) -> object:
        calls.append("keep")
        return ctx.artifacts.write("notes.txt", "the notes " * 50_000)

    @tool(replay="never")
    def send(ctx: ToolContext) -> str:
        calls.append("send")
        if calls.count("send") == 1:
            raise CrashIn  # the process dies after the email went out, before its result
        return "sent"

    script = [{"tool": "keep", "args": {}}, {"tool": "send", "args": {}}, {"final": "done"}]
    return Agent(model=ScriptedModel(script), tools=[keep, send])


async def test_a_run_exported_and_imported_elsewhere_resumes_there_unknowns_and_all(pg_url, own_db, tmp_path):
    run_id = fresh("moving")
    calls: list[str] = []
    async with PostgresStore(pg_url, lease=2) as here:
        with pytest.raises(CrashIn):
            await agent_with(calls).run("move me", run_id=run_id, store=here)
    report = await export_runs(pg_url, [run_id], to=tmp_path / "moved")
    assert [r.outcome for r in report.runs] == ["exported"] and report.runs[0].products == 1
    assert not verify_logs(tmp_path / "moved", workers=1).failed()
    assert (tmp_path / "moved" / f"{run_id}.artifacts" / "notes.txt").read_bytes() == b"the notes " * 50_000

    imported = await import_runs([tmp_path / "moved"], store_spec=own_db)
    assert [r.outcome for r in imported.runs] == ["imported"]
    again = await import_runs([tmp_path / "moved"], store_spec=own_db)  # idempotent
    assert [r.outcome for r in again.runs] == ["unchanged"]

    async with PostgresStore(own_db, lease=2) as there:
        assert await there.get_product(run_id, "notes.txt") == b"the notes " * 50_000
        with pytest.raises(NeedsOperatorError):  # the unknown `never` send is still unknown there
            await agent_with(calls).run(run_id=run_id, store=there)
        assert calls == ["keep", "send"]
        await mark_resolved(there, run_id, "s2-a1", executed=True, observation="sent", reason="the mail arrived")
        result = await agent_with(calls).run(run_id=run_id, store=there)
        assert result.text == "done" and calls == ["keep", "send"]  # nothing repeated
    # ...and the same files resume in a run directory too.
    local = JsonlStore(tmp_path / "moved")
    with pytest.raises(NeedsOperatorError):
        await agent_with([]).run(run_id=run_id, store=local)


def test_import_refuses_a_run_id_that_exists_with_other_content(pg_url, own_db, tmp_path):
    run_id = fresh("clash")

    async def start(url: str, goal: str) -> None:
        async with PostgresStore(url, lease=2) as store:
            await Agent(model=ScriptedModel([{"final": "ok"}]), tools=[]).run(goal, run_id=run_id, store=store)

    asyncio.run(start(pg_url, "one goal"))
    asyncio.run(start(own_db, "another goal"))
    assert asyncio.run(export_runs(pg_url, [run_id], to=tmp_path / "x")).runs[0].outcome == "exported"
    done = polyloop_in_process("import", str(tmp_path / "x"), "--store", own_db, "--json")
    assert done.code == 6, done.stderr
    doc = done.json()
    assert doc["action"] == "import" and doc["summary"]["refused"] == 1
    assert doc["runs"][0]["conflict"] is True and "other content" in doc["runs"][0]["reason"]
    async def goal() -> str:
        async with PostgresStore(own_db, lease=2) as store:
            return (await store.read_log(run_id))[0].goal

    assert asyncio.run(goal()) == "another goal"  # nothing was written


def test_the_export_and_import_commands(pg_url, own_db, tmp_path):
    run_id = fresh("cli")

    async def start() -> None:
        async with PostgresStore(pg_url, lease=2) as store:
            await Agent(model=ScriptedModel([{"final": "ok"}]), tools=[]).run("g", run_id=run_id, store=store)

    asyncio.run(start())
    out = tmp_path / "out"
    done = polyloop_in_process("export", run_id, "--store", pg_url, "--to", str(out), "--json")
    assert done.code == 0, done.stderr
    assert done.json()["runs"][0]["outcome"] == "exported" and done.json()["summary"]["exported"] == 1
    again = polyloop_in_process("export", run_id, "--store", pg_url, "--to", str(out), "--json")  # the same export
    assert again.code == 0, again.stderr
    assert again.json()["runs"][0]["outcome"] == "unchanged" and again.json()["summary"]["unchanged"] == 1
    (out / f"{run_id}.jsonl").write_bytes((out / f"{run_id}.jsonl").read_bytes() + b"\n")
    assert polyloop_in_process("export", run_id, "--store", pg_url, "--to", str(out)).code == 6
    assert polyloop_in_process("export", "no-such-run", "--store", pg_url, "--to", str(out)).code == 2
    assert polyloop_in_process("import", str(tmp_path / "missing"), "--store", own_db).code == 2
    assert polyloop_in_process("import", str(out), "--store", str(tmp_path / "dir")).code == 2
    (out / f"{run_id}.jsonl").unlink()
    polyloop_in_process("export", run_id, "--store", pg_url, "--to", str(out))
    done = polyloop_in_process("import", str(out), "--store", own_db)
    assert done.code == 0 and "imported" in done.stdout


def test_archive_on_postgres_keeps_the_products(pg_url, tmp_path, pg_conn):
    run_id = fresh("arch")

    @tool(replay="safe")
    def keep(ctx: ToolContext) -> object:
        return ctx.artifacts.write("p.bin", b"\x00" * 300_000)

    async def start() -> None:
        async with PostgresStore(pg_url, lease=2) as store:
            agent = Agent(model=ScriptedModel([{"tool": "keep", "args": {}}, {"final": "ok"}]), tools=[keep])
            await agent.run("g", run_id=run_id, store=store)

    asyncio.run(start())
    done = polyloop_in_process("archive", run_id, "--store", pg_url, "--to", str(tmp_path / "a"), "--json")
    assert done.code == 0, done.stderr
    assert (tmp_path / "a" / f"{run_id}.artifacts" / "p.bin").read_bytes() == b"\x00" * 300_000
    assert not verify_logs(tmp_path / "a", workers=1).failed()
    digest = hashlib.sha256(b"\x00" * 300_000).hexdigest()
    assert pg_conn.execute("SELECT count(*) FROM polyloop_products WHERE run_id = %s", (run_id,)).fetchone()[0] == 0
    assert pg_conn.execute("SELECT count(*) FROM polyloop_product_chunks WHERE sha256 = %s", (digest,)).fetchone()[0] == 0


def test_export_refuses_a_run_whose_product_was_altered_in_the_database_and_writes_nothing(pg_url, pg_conn, tmp_path):
    run_id = fresh("altered")

    @tool(replay="safe")
    def keep(ctx: ToolContext) -> object:
        return ctx.artifacts.write("p.bin", bytes(range(256)) * 4000)

    async def start() -> None:
        async with PostgresStore(pg_url, lease=2) as store:
            agent = Agent(model=ScriptedModel([{"tool": "keep", "args": {}}, {"final": "ok"}]), tools=[keep])
            await agent.run("g", run_id=run_id, store=store)

    asyncio.run(start())
    pg_conn.execute(
        "UPDATE polyloop_product_chunks SET data = overlay(data placing '\\x00'::bytea from 5 for 1) "
        "WHERE n = 0 AND sha256 = (SELECT sha256 FROM polyloop_products WHERE run_id = %s)", (run_id,))
    out = tmp_path / "out"
    done = polyloop_in_process("export", run_id, "--store", pg_url, "--to", str(out), "--json")
    assert done.code == 1, done.stderr
    [moved] = done.json()["runs"]
    assert moved["outcome"] == "refused" and "'p.bin'" in moved["reason"] and "altered" in moved["reason"], moved
    assert sorted(p.name for p in out.rglob("*") if p.is_file()) == []  # no log, no product, no temporary file
    assert not (out / f"{run_id}.artifacts").exists()  # nor the run's products directory, made for it
    # Archive is built on export: the run stays in the database.
    kept = polyloop_in_process("archive", run_id, "--store", pg_url, "--to", str(tmp_path / "a"), "--json")
    assert kept.code == 1, kept.stderr
    assert pg_conn.execute("SELECT count(*) FROM polyloop_records WHERE run_id = %s", (run_id,)).fetchone()[0] > 0


async def test_import_refuses_a_run_a_live_process_still_holds_in_its_directory(own_db, tmp_path):
    # Its log is still growing there: a copy in the database would be resumable beside the live run.
    folder = tmp_path / "live"
    local = JsonlStore(folder)
    run_id = fresh("held")
    await Agent(model=ScriptedModel([{"final": "ok"}]), tools=[]).run("g", run_id=run_id, store=local)
    async with local.lock(run_id):  # a live holder (the kernel's flock, as another process holds it)
        report = await import_runs([folder], store_spec=own_db)
    [moved] = report.runs
    assert moved.outcome == "refused" and not moved.conflict and "holds it" in (moved.reason or ""), moved
    async with PostgresStore(own_db, lease=2) as there:
        assert run_id not in await there.list_runs()
    again = await import_runs([folder], store_spec=own_db)  # once it let go
    assert [r.outcome for r in again.runs] == ["imported"]


async def test_export_refuses_a_run_a_live_process_holds_in_the_database_and_writes_nothing(pg_url, tmp_path):
    run_id = fresh("leased")
    async with PostgresStore(pg_url, lease=30) as store:
        await Agent(model=ScriptedModel([{"final": "ok"}]), tools=[]).run("g", run_id=run_id, store=store)
        async with store.lock(run_id):  # a live holder with a lease, as a worker holds a run
            report = await export_runs(pg_url, [run_id], to=tmp_path / "out")
    [moved] = report.runs
    assert moved.outcome == "refused" and not moved.conflict and "a live process holds it" in (moved.reason or "")
    assert list((tmp_path / "out").iterdir()) == []
    assert [r.outcome for r in (await export_runs(pg_url, [run_id], to=tmp_path / "out")).runs] == ["exported"]


async def test_export_from_a_directory_refuses_only_the_run_whose_product_is_not_the_file_written(tmp_path):
    # A link (or a FIFO) where a product was written is a missing product: that run is refused, the others move.
    folder = tmp_path / "runs"
    local = JsonlStore(folder)

    @tool(replay="safe")
    def keep(ctx: ToolContext) -> object:
        return ctx.artifacts.write("p.bin", b"kept")

    linked, plain = fresh("linked"), fresh("plain")
    for run_id in (linked, plain):
        agent = Agent(model=ScriptedModel([{"tool": "keep", "args": {}}, {"final": "ok"}]), tools=[keep])
        await agent.run("g", run_id=run_id, store=local)
    product = folder / f"{linked}.artifacts" / "p.bin"
    product.unlink()
    product.symlink_to(folder / f"{plain}.artifacts" / "p.bin")  # the same bytes, through a link
    report = await export_runs(str(folder), [linked, plain], to=tmp_path / "out")
    assert [r.outcome for r in report.runs] == ["refused", "exported"], report
    assert "symbolic link" in (report.runs[0].reason or ""), report.runs[0]
    assert not (tmp_path / "out" / f"{linked}.jsonl").exists()
