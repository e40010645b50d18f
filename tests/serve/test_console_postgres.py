"""The console on a PostgreSQL store: the same pages and decisions, in Chromium against `polyloop serve --store`."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.pg_schema import own_schema
from console_helpers import TARGET, Server, off_thread

from polyloop import NeedsOperatorError, inspect_run, resume_run, run_target
from polyloop.stores import open_store

pytestmark = pytest.mark.slow  # a browser and a server of its own: CI runs it by `pytest -m slow`


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    """A schema of this module's own on the test server, dropped at the end."""
    with own_schema("polyloop_console") as url:
        yield url


def _on_pg(url: str, coro: Any) -> Any:
    async def go() -> Any:
        store = open_store(url)
        try:
            return await coro(store)
        finally:
            await store.aclose()

    return off_thread(lambda: asyncio.run(go()))


def test_approving_on_a_postgresql_store_lets_the_run_finish(browser: Any, pg_url: str, tmp_path: Path) -> None:
    async def start(store: Any) -> None:
        with pytest.raises(NeedsOperatorError):
            await run_target(TARGET, goal=json.dumps({"tool": "pay", "args": {"to": "acme", "amount": 42}}),
                             store=store, run_id="pg-pay-1")

    _on_pg(pg_url, start)
    server = Server(tmp_path, extra=("--store", pg_url))
    server.start()
    try:
        tab = browser.new_context().new_page()
        tab.goto(server.token_url)
        tab.click("text=pg-pay-1")
        tab.fill("#req-s1-a1 form.approve input[name=reason]", "on the database")
        tab.click("#req-s1-a1 form.approve button")
        assert "approve s1-a1 of run pg-pay-1" in tab.inner_text("#what")
        tab.click("text=Back to run pg-pay-1")
        os.environ["CONSOLE_LEDGER"] = str(tmp_path / "ledger.txt")
        try:
            _on_pg(pg_url, lambda store: resume_run("pg-pay-1", store=store))
        finally:
            del os.environ["CONSOLE_LEDGER"]
        tab.wait_for_selector("#status.st-finished", timeout=15_000)
        assert tab.inner_text("#result") == "the tool said: paid 42 to acme ()"
        report = _on_pg(pg_url, lambda store: inspect_run(store, "pg-pay-1"))
        assert report.to_json()["requests"][0]["decision"]["reason"] == "on the database"
        tab.context.close()
    finally:
        server.stop()
