"""The storage contract kit, run against PostgresStore on a real server."""

from __future__ import annotations

import pytest

from polyloop.stores import PostgresStore
from polyloop.testing import StoreContract


class TestPostgresStore(StoreContract):
    @pytest.fixture
    def store_factory(self, pg_url):
        # A new store per property: each runs in its own event loop, and the
        # store's connections close when that loop shuts down.
        return lambda: PostgresStore(pg_url, lease=5)
