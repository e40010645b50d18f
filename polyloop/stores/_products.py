"""What moving products in and out of a database store needs without the database's driver.

`CHUNK` is the size of a product's chunk in PostgreSQL (and of the pieces
export streams); `ProductFile` is a product `import` hands to
`PostgresStore.load_run`. Kept apart from `_pg_*` so that `export`/`import`
(polyloop/_operate/transfer.py) import no psycopg until a database is used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

CHUNK = 256 * 1024  # bytes per chunk row: well under bytea's limits, small enough to stream


@dataclass(frozen=True, slots=True)
class ProductFile:
    """A product to load: its name, size and SHA-256 (already computed), and its bytes in chunks."""

    name: str
    size: int
    sha256: str
    chunks: Callable[[], Iterator[bytes]]  # called once, at most, when the content is not stored yet
