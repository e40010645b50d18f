"""The model-adapter tests against a hostile server: both SDKs needed, no real key, URL or model seen."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("openai")
pytest.importorskip("anthropic")


@pytest.fixture(autouse=True)
def _no_real_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith(("OPENAI_", "ANTHROPIC_", "POLYLOOP_"))]:
        monkeypatch.delenv(name)
