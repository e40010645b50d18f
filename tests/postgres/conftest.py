"""A real PostgreSQL for the PostgresStore tests.

The server at $POLYLOOP_TEST_PG_URL (default: the project machines' server,
postgresql://postgres@127.0.0.1:5432/test) if it answers; otherwise a
throwaway server started from the `pgserver` package (PostgreSQL binaries on
PyPI, in the `test` extra). Under CI=true these tests never skip: no server
is a failure.
"""

from __future__ import annotations

import os

import psycopg
import pytest

from pg_helpers import DEFAULT_URL, reachable


@pytest.fixture(scope="session")
def pg_url(tmp_path_factory) -> str:
    url = os.environ.get("POLYLOOP_TEST_PG_URL", DEFAULT_URL)
    why = reachable(url)
    if why is None:
        return url
    try:
        import pgserver
    except ImportError:
        message = f"no PostgreSQL at {url} ({why}) and the pgserver package is not installed"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    # pgserver asks platformdirs for a runtime directory, which warns without one.
    os.environ.setdefault("XDG_RUNTIME_DIR", str(tmp_path_factory.mktemp("runtime")))
    server = pgserver.get_server(tmp_path_factory.mktemp("pgdata"), cleanup_mode="delete")
    return server.get_uri()


@pytest.fixture
def pg_conn(pg_url):
    with psycopg.connect(pg_url, autocommit=True) as conn:
        yield conn
