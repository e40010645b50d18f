"""The storage contract kit, and the batching cases of tests/stores/contract, run against PostgresStore on a real server."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from polyloop.stores import PostgresStore
from polyloop.testing import StoreContract

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "contract"))
from batching_cases import BatchingCases  # noqa: E402


class TestPostgresStore(StoreContract):
    @pytest.fixture
    def store_factory(self, pg_url):
        # A new store per property: each runs in its own event loop, and the
        # store's connections close when that loop shuts down.
        return lambda: PostgresStore(pg_url, lease=5)


class TestPostgresStoreBatching(BatchingCases):
    @pytest.fixture
    def store_factory(self, pg_url):
        return lambda: PostgresStore(pg_url, lease=5)
