"""examples/sqlite_store.py passes the storage contract, syncs the right writes, survives SIGKILL."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from polyloop import CorruptLogError, RunActiveError, classify, load_target, mark_resolved
from polyloop.testing import StoreContract, check_store

from example_helpers import EXAMPLES, Runner, clean_env


@pytest.fixture
def sqlite_store(load_example: Callable[[str], ModuleType]) -> ModuleType:
    return load_example("sqlite_store")


@pytest.fixture
def opened(sqlite_store: ModuleType, tmp_path: Path) -> Iterator[Callable[[], Any]]:
    """Open stores on one database file; close them all afterwards."""
    stores: list[Any] = []

    def open_store() -> Any:
        store = sqlite_store.SqliteStore(tmp_path / "runs.db")
        stores.append(store)
        return store

    yield open_store
    for store in stores:
        store.close()


class TestSqliteStoreContract(StoreContract):
    """The whole contract kit, one test per property, against the example store."""

    @pytest.fixture
    def store_factory(self, opened: Callable[[], Any]) -> Callable[[], Any]:
        return opened


def test_check_store_passes_without_pytest(opened: Callable[[], Any]) -> None:
    check_store(opened)


def test_durable_kinds_commit_with_synchronous_full(opened: Callable[[], Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POLYLOOP_DEMO_DIR", str(tmp_path / "space"))
    agent = load_target(f"{EXAMPLES / 'demo.py'}:agent")
    store = opened()
    statements: list[str] = []

    async def go() -> None:
        await store._run(lambda: store._db().set_trace_callback(statements.append))
        await agent.run("go", run_id="traced", store=store)
        (mode,) = await store._run(lambda: store._db().execute("PRAGMA journal_mode").fetchone())
        assert mode == "wal"

    asyncio.run(go())
    # Each INSERT, with the synchronous setting in force when it committed.
    committed: list[tuple[str, str]] = []
    sync = ""
    for sql in statements:
        if sql.startswith("PRAGMA synchronous="):
            sync = sql.split("=", 1)[1]
        elif sql.startswith("INSERT INTO polyloop_records"):
            kind = sql.split("VALUES", 1)[1].split(",")[2].strip().strip("'")
            committed.append((kind, sync))
    assert [k for k, _ in committed].count("intent") == 9  # 5 model calls + 4 actions
    durable = {"run_started", "intent", "run_finished", "resolution"}
    for kind, setting in committed:
        assert setting == ("FULL" if kind in durable else "NORMAL"), (kind, setting)


CRASHING_RUN = textwrap.dedent(
    """
    import asyncio, sys
    sys.path.insert(0, sys.argv[1])
    from demo import agent
    from sqlite_store import SqliteStore
    asyncio.run(agent.run("write up the notes", run_id="crash", store=SqliteStore(sys.argv[2])))
    """
)


def test_sigkill_mid_action_leaves_an_unknown_never_action(opened: Callable[[], Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    space = tmp_path / "space"
    done = subprocess.run(
        [sys.executable, "-c", CRASHING_RUN, str(EXAMPLES), str(tmp_path / "runs.db")],
        env=clean_env(POLYLOOP_DEMO_CRASH="1", POLYLOOP_DEMO_DIR=str(space)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    monkeypatch.setenv("POLYLOOP_DEMO_DIR", str(space))
    agent = load_target(f"{EXAMPLES / 'demo.py'}:agent")
    store = opened()

    async def recover() -> None:
        recovery = classify(await store.read_log("crash"), run_id="crash")
        assert [e.result_id for e in recovery.blocking] == ["s2-a1"]
        await mark_resolved(store, "crash", "s2-a1", executed=True, observation="wrote it", reason="test")
        result = await agent.run(run_id="crash", store=store)
        assert result.reason == "final_answer"
        assert classify(await store.read_log("crash"), run_id="crash").status == "finished"

    asyncio.run(recover())
    assert (space / "crash" / "todo.txt").exists()


HOLDER = textwrap.dedent(
    """
    import asyncio, sys
    sys.path.insert(0, sys.argv[1])
    from sqlite_store import SqliteStore

    async def hold():
        store = SqliteStore(sys.argv[2])
        async with store.lock("held"):
            print("held", flush=True)
            await asyncio.to_thread(sys.stdin.read)
        store.close()

    asyncio.run(hold())
    """
)


def test_the_lock_excludes_another_process_until_it_exits(opened: Callable[[], Any], tmp_path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(EXAMPLES), str(tmp_path / "runs.db")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        store = opened()
        assert store.holder("held") == f"pid {child.pid} on {__import__('socket').gethostname()}"

        async def try_lock() -> None:
            async with store.lock("held"):
                pass

        with pytest.raises(RunActiveError, match=f"pid {child.pid}"):
            asyncio.run(try_lock())
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)
        if child.stdout is not None:
            child.stdout.close()
    asyncio.run(try_lock())
    assert store.holder("held") is None


def test_a_row_that_is_not_a_record_is_corruption(opened: Callable[[], Any], tmp_path: Path) -> None:
    store = opened()
    from polyloop import RunStarted

    asyncio.run(store.write_run_started(RunStarted(run_id="bad", goal="g")))
    with sqlite3.connect(tmp_path / "runs.db") as db:
        db.execute("INSERT INTO polyloop_records VALUES ('bad', 1, 'intent', ?)", (b'{"record": "intent"}',))
    db.close()
    with pytest.raises(CorruptLogError, match="record 2"):
        asyncio.run(store.read_log("bad"))


def test_python_examples_sqlite_store_runs_the_demo_into_sqlite(python: Runner, workdir: Path) -> None:
    done = python("sqlite_store.py", "demo.db")
    assert done.returncode == 0, done.stderr
    assert "final_answer after 5 steps" in done.stdout
    assert "21 records in demo.db" in done.stdout
    with sqlite3.connect(workdir / "demo.db") as db:
        (count,) = db.execute("SELECT count(*) FROM polyloop_records").fetchone()
    db.close()
    assert count == 21
