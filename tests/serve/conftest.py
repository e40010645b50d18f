"""Fixtures of the console's browser tests: one Chromium per module, one `polyloop serve` per module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from console_helpers import Server, chromium


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    path = chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        # --no-sandbox: the tests may run as root (CI containers), where Chromium's sandbox cannot start.
        b = p.chromium.launch(executable_path=path, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("console") / "runs"


@pytest.fixture(scope="module")
def server(runs: Path) -> Iterator[Server]:
    runs.mkdir(parents=True, exist_ok=True)
    s = Server(runs).start()
    yield s
    s.stop()


@pytest.fixture
def page(browser: Any, server: Server) -> Iterator[Any]:
    """A signed-in tab (its own browser context: its own cookies)."""
    context = browser.new_context()
    tab = context.new_page()
    tab.goto(server.token_url)
    # Off the runs page it landed on: that page redraws itself when a run appears, and a redraw
    # racing the test's own first navigation would cut it short ("interrupted by another navigation").
    tab.goto("about:blank")
    yield tab
    context.close()
