"""The Anthropic adapter tests never see a real key, URL or model from the developer's shell."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("anthropic")


@pytest.fixture(autouse=True)
def _no_real_anthropic(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith(("ANTHROPIC_", "POLYLOOP_"))]:
        monkeypatch.delenv(name)
