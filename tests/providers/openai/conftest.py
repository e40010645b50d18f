"""Fixtures for the OpenAI-compatible adapter tests: no test ever sees a real key or URL."""

from __future__ import annotations

import pytest

pytest.importorskip("openai")

_ENV = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_MODEL",
    "POLYLOOP_MODEL",
    "OPENAI_ORG_ID",
    "OPENAI_PROJECT_ID",
    "OPENAI_ADMIN_KEY",
    "POLYLOOP_DIR",
)


@pytest.fixture(autouse=True)
def _no_real_openai(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)
