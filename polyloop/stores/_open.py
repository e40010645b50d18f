"""The one place a store spec (`--store`, `$POLYLOOP_STORE`) becomes a store.

Beside the facade rather than in it, so the library's own modules (`ls`, the
batch, its workers) import the store modules directly and never the
`polyloop.stores` package, whose lazy names reach up to the queue.
"""

from __future__ import annotations

from typing import Any

from .._log.errors import StoreError
from .._log.store_port import Store
from ._jsonl import JsonlStore
from ._url import store_kind


def open_store(spec: str) -> Store:
    """The store a `--store` value names: a `postgresql://` URL or a directory of JSONL logs.

    The one place a store spec becomes a store: `store_kind` decides which.

    Args:
        spec: `postgresql://...` or `postgres://...` for a `PostgresStore`
            (needs the `postgres` extra); a directory for a `JsonlStore`.
            Any other `scheme://` is refused.

    Returns:
        The store, not yet connected (a `PostgresStore` connects on first use).

    Raises:
        StoreUrlError: `spec` is a URL of another scheme (`mysql://`,
            `sqlite:///x.db`, `postgresql+psycopg://`); nothing was created.
        StoreError: a PostgreSQL URL was given but psycopg is not installed.
    """
    if store_kind(spec) == "postgresql":
        return postgres_class()(spec)
    return JsonlStore(spec)


def postgres_class() -> Any:
    """`PostgresStore`, imported on first use (psycopg is an extra); a clear `StoreError` without it."""
    try:
        from ._postgres import PostgresStore
    except ImportError as exc:
        raise StoreError(
            f"a PostgreSQL store needs psycopg: pip install 'polyloop[postgres]' ({exc})"
        ) from exc
    return PostgresStore
