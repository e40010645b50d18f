"""Fixtures for the Anthropic adapter tests: no test ever sees a real key or URL."""

from __future__ import annotations

import pytest

pytest.importorskip("anthropic")

_ENV = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_MODEL",
    "POLYLOOP_MODEL",
    "POLYLOOP_DIR",
)


@pytest.fixture(autouse=True)
def _no_real_anthropic(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)
