"""The hold that keeps one live invocation per batch: per schema, and let go as the invocation ends."""

from __future__ import annotations

import pytest

from polyloop import BatchError
from polyloop._fleet.pg_batch import DatabaseBatch


def test_batches_of_one_name_in_two_schemas_are_two_batches(pg_url: str, own_db: str) -> None:
    with DatabaseBatch(pg_url, "goals", wait=0), DatabaseBatch(own_db, "goals", wait=0):
        with pytest.raises(BatchError, match="batch goals is already running"):
            with DatabaseBatch(own_db, "goals", wait=0):
                pass


def test_an_invocation_that_has_ended_has_let_go_at_once(own_db: str) -> None:
    for _ in range(20):  # no waiting for the server to notice a closed session
        with DatabaseBatch(own_db, "goals", wait=0):
            pass
