"""Store implementations. `JsonlStore` is the embedded default.

`PostgresStore` (many machines, fenced leases, a run queue) needs the
`postgres` extra (`pip install 'polyloop[postgres]'`); it is imported only
when first used, so the JSONL-only install does not need psycopg.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._log.store_port import Store
from .._log.codec import ParsedLog, parse_log
from ._jsonl import JsonlStore
from ._url import StoreKind, redact_url, store_kind

if TYPE_CHECKING:
    from ._pg_lease import Lease, LeaseLostError
    from ._postgres import PostgresStore
    from .._fleet.queue import Worker, WorkerEvent, submit

__all__ = [
    "JsonlStore",
    "Lease",
    "LeaseLostError",
    "ParsedLog",
    "PostgresStore",
    "StoreKind",
    "Worker",
    "WorkerEvent",
    "open_store",
    "parse_log",
    "redact_url",
    "store_kind",
    "submit",
]

_LAZY = {
    "PostgresStore": "._postgres",
    "Lease": "._pg_lease",
    "LeaseLostError": "._pg_lease",
    # The queue lives beside the run loop (it runs agents); it imports psycopg lazily too.
    "Worker": ".._fleet.queue",
    "WorkerEvent": ".._fleet.queue",
    "submit": ".._fleet.queue",
}


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
        return _postgres_class()(spec)
    return JsonlStore(spec)


def _postgres_class() -> Any:
    try:
        from ._postgres import PostgresStore
    except ImportError as exc:
        from .._log.errors import StoreError

        raise StoreError(
            f"a PostgreSQL store needs psycopg: pip install 'polyloop[postgres]' ({exc})"
        ) from exc
    return PostgresStore


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        if name == "PostgresStore":
            return _postgres_class()
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
