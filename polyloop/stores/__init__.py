"""Store implementations. `JsonlStore` is the embedded default.

`PostgresStore` (many machines, fenced leases, a run queue) needs the
`postgres` extra (`pip install 'polyloop[postgres]'`); it is imported only
when first used, so the JSONL-only install does not need psycopg.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._log.codec import ParsedLog, parse_log
from ._jsonl import JsonlStore
from ._open import open_store
from ._open import postgres_class as _postgres_class
from ._url import StoreKind, redact_url, store_kind

if TYPE_CHECKING:
    from ._pg_lease import Lease, LeaseLostError
    from ._postgres import PostgresStore

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
    # The queue's public names, documented here since PostgreSQL workers began: the queue itself
    # lives above the stores, beside the run loop (it runs agents), so these are forwarded on
    # first use and never imported by the store layer.
    "Worker": ".._fleet.queue",
    "WorkerEvent": ".._fleet.queue",
    "submit": ".._fleet.queue",
}


# Public names report their public home (they are defined in private modules).
open_store.__module__ = __name__


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        if name == "PostgresStore":
            return _postgres_class()
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
