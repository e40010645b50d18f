"""The batching capability (`write_intents`), run against the stores we ship that offer it."""

from __future__ import annotations

import pytest

from polyloop import JsonlStore
from polyloop.testing import MemoryStore

from batching_cases import BatchingCases


class TestJsonlStoreBatching(BatchingCases):
    @pytest.fixture
    def store_factory(self, tmp_path):
        return lambda: JsonlStore(tmp_path / "runs")


class TestMemoryStoreBatching(BatchingCases):
    @pytest.fixture
    def store_factory(self):
        shared = MemoryStore()
        return lambda: shared


class ReversingStore(MemoryStore):
    """Writes a batch's intents back to front: the kind of bug the cases exist to catch."""

    async def write_intents(self, run_id, records):
        await super().write_intents(run_id, list(reversed(records)))


class TestTheCasesCatchABrokenStore(BatchingCases):
    """The cases that check order fail on a store that reverses a batch: they can fail."""

    @pytest.fixture
    def store_factory(self):
        shared = ReversingStore()
        return lambda: shared

    def test_batched_intents_read_back_in_order_between_single_writes(self, store_factory):
        with pytest.raises(AssertionError):
            super().test_batched_intents_read_back_in_order_between_single_writes(store_factory)

    def test_a_step_of_several_calls_runs_through_write_intents(self, store_factory):
        with pytest.raises(AssertionError):
            super().test_a_step_of_several_calls_runs_through_write_intents(store_factory)
