"""Shared fixtures: a fresh JSONL store per test, and small agents."""

from __future__ import annotations

import pytest

from polyloop import JsonlStore
from polyloop.testing import MemoryStore


@pytest.fixture
def store(tmp_path) -> JsonlStore:
    return JsonlStore(tmp_path / "runs")


@pytest.fixture
def memory() -> MemoryStore:
    return MemoryStore()
