"""The storage contract suite, run against the stores we ship."""

from __future__ import annotations

import pytest

from polyloop import JsonlStore
from polyloop.testing import PROPERTIES, MemoryStore, StoreContract, check_store


class TestJsonlStore(StoreContract):
    @pytest.fixture
    def store_factory(self, tmp_path):
        return lambda: JsonlStore(tmp_path / "runs")


class TestMemoryStore(StoreContract):
    @pytest.fixture
    def store_factory(self):
        shared = MemoryStore()
        return lambda: shared


def test_every_property_is_a_test_of_the_base_class():
    names = {name for name in dir(StoreContract) if name.startswith("test_")}
    assert names == {f"test_{p.__name__}" for p in PROPERTIES}


def test_check_store_runs_without_pytest(tmp_path):
    check_store(lambda: JsonlStore(tmp_path / "runs"))


class ForgetfulStore(MemoryStore):
    """Drops step records: the kind of bug the contract exists to catch."""

    async def write_step_completed(self, run_id, record):
        return None


def test_the_contract_catches_a_broken_store():
    with pytest.raises(AssertionError, match="round_trip_every_record_kind"):
        check_store(ForgetfulStore)


class TruncatingProducts(MemoryStore):
    """Keeps only the first 1,000 bytes of a product: the contract must notice."""

    async def put_product(self, run_id, name, data):
        await super().put_product(run_id, name, data[:1000])


def test_the_contract_catches_a_store_that_damages_products():
    with pytest.raises(AssertionError, match="products_round_trip"):
        check_store(TruncatingProducts)
