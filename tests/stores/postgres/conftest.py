"""A real PostgreSQL for the PostgresStore tests.

The server at $POLYLOOP_TEST_PG_URL (default: the project machines' server,
postgresql://postgres@127.0.0.1:5432/test) if it answers; otherwise a
throwaway server started from the `pgserver` package (PostgreSQL binaries on
PyPI, in the `test` extra). Under CI=true these tests never skip: no server
is a failure.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from pg_helpers import DEFAULT_URL, private_dir, reachable, with_search_path


_CREATED: list[str] = []  # directories this session made, removed at its end


def _server() -> tuple[str, Any]:
    """The server's URL, and the throwaway server to clean up (None for one already running)."""
    url = os.environ.get("POLYLOOP_TEST_PG_URL", DEFAULT_URL)
    why = reachable(url)
    if why is None:
        return url, None
    # pgserver asks platformdirs for a runtime directory, which warns without one.
    if "XDG_RUNTIME_DIR" not in os.environ:
        os.environ["XDG_RUNTIME_DIR"] = str(private_dir("runtime"))
        _CREATED.append(os.environ["XDG_RUNTIME_DIR"])
    try:
        import pgserver
    except ImportError:
        message = f"no PostgreSQL at {url} ({why}) and the pgserver package is not installed"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    server = pgserver.get_server(private_dir("pgdata"), cleanup_mode="delete")
    return server.get_uri(), server


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """The test server's URL (the one at $POLYLOOP_TEST_PG_URL, or a throwaway pgserver)."""
    url, server = _server()
    try:
        yield url
    finally:
        if server is not None:
            server.cleanup()
            for created in _CREATED:
                shutil.rmtree(created, ignore_errors=True)


@pytest.fixture
def pg_url(pg_server) -> Iterator[str]:
    """A URL whose sessions use a schema of this test's own, dropped when the test ends.

    The database may be shared, and a worker claims whatever its queue holds: a run another test
    left queued or leased (a killed worker's) must never reach this test's workers.
    """
    schema = f"polyloop_test_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield with_search_path(pg_server, schema)
    finally:
        with psycopg.connect(pg_server, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture
def pg_conn(pg_url):
    with psycopg.connect(pg_url, autocommit=True) as conn:
        yield conn


# A short lease, so tests of expiry and takeover wait little; renewed every 2/3 s meanwhile.
LEASE = 2


@pytest.fixture
async def store(pg_url):
    """A `PostgresStore` on the test schema."""
    from polyloop.stores import PostgresStore

    async with PostgresStore(pg_url, lease=LEASE) as s:
        yield s


@pytest.fixture
async def other(pg_url):
    """A second store, as another worker's: its leases carry another holder name."""
    from polyloop.stores import PostgresStore

    async with PostgresStore(pg_url, lease=LEASE, name="the other store") as s:
        yield s


@pytest.fixture
def own_db(pg_url):
    """A URL of the test server whose sessions see a fresh schema of their own (only this test's runs)."""
    schema = f"polyloop_own_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield with_search_path(pg_url, schema)
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
