"""The power-loss checker has teeth: stores broken on purpose fail it, each for the right reason.

A checker that passes everything proves nothing. Each broken store below
skips one piece of the durability the JSONL store relies on, and the
explorer, run over the same scenario, must report the loss that follows.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest

from polyloop import encode_record
from powerloss.check import check, scratch_root
from powerloss.explore import explore
from powerloss.recorder import RecordingDisk
from powerloss.scenarios import SCENARIOS, AckingStore, record


class UnsyncedIntents(AckingStore):
    """Writes intents like results: appended, never fsync'd, yet acknowledged."""

    async def write_intent(self, run_id: str, record: Any) -> None:
        self._append(self._file(run_id), encode_record(record), run_id)
        self._ack(run_id, record)


class NoDirectorySync(RecordingDisk):
    """A disk on which the store's directory fsyncs do nothing (as if the store skipped them)."""

    def fsync_dir(self, path: Any) -> None:
        pass


class ForgetfulSync(RecordingDisk):
    """A disk whose fsync of a log does nothing: what a disk that lies about flushes does."""

    def fsync(self, fd: int) -> None:
        pass


@pytest.mark.parametrize(
    ("broken", "expected"),
    [
        ({"store_type": UnsyncedIntents}, "silently lost"),
        ({"store_type": UnsyncedIntents}, "acknowledged record intent"),
        ({"disk_type": NoDirectorySync}, "the log is gone, though records were acknowledged durable"),
        ({"disk_type": ForgetfulSync}, "acknowledged record"),
    ],
    ids=["unsynced-intent-loses-an-effect", "unsynced-intent-is-missing", "no-directory-sync", "lying-fsync"],
)
async def test_a_store_that_skips_durability_is_caught(broken: dict[str, Any], expected: str) -> None:
    scenario = SCENARIOS["plain"]
    with tempfile.TemporaryDirectory(dir=scratch_root()) as root:
        trace = await record(scenario, Path(root), **broken)
    problems = []
    for found in explore(trace, per_point=4, seed=1):
        problems += await check(found, scenario)
    assert any(expected in p for p in problems), problems[:5]
