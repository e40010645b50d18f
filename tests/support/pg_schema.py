"""A schema of a test's own on the test PostgreSQL server ($POLYLOOP_TEST_PG_URL), dropped at the end.

For tests outside tests/stores/postgres (whose conftest also starts a throwaway
server when none runs): without a server they skip, and fail under CI=true.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from urllib.parse import parse_qsl, quote, urlencode

import pytest

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"


@contextlib.contextmanager
def own_schema(prefix: str) -> Iterator[str]:
    """Yield a store URL whose search_path is a new schema `PREFIX_<random>`, dropped on exit."""
    psycopg = pytest.importorskip("psycopg")
    url = os.environ.get("POLYLOOP_TEST_PG_URL", DEFAULT_URL)
    try:
        conn = psycopg.connect(url, autocommit=True, connect_timeout=3)
    except psycopg.Error as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"no PostgreSQL at {url}: {exc}")
        pytest.skip(f"no PostgreSQL at {url}: {exc}")
    schema = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    base, _, query = url.partition("?")
    params = [(k, v) for k, v in parse_qsl(query) if k != "options"] + [("options", f"-csearch_path={schema}")]
    try:
        yield f"{base}?{urlencode(params, quote_via=quote)}"
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
