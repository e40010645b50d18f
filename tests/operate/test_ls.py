"""`list_runs`: every run of a directory, as `inspect_run` judges it, without writing anything."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
from pathlib import Path

import orjson
import pytest

from polyloop import (
    Intent,
    JsonlStore,
    ModelCallResult,
    RunFinished,
    RunStarted,
    RunSummary,
    StepCompleted,
    encode_record,
    inspect_run,
    list_runs,
)
from polyloop._log.ids import idempotency_key

T0 = "2026-12-01T08:00:00.000000Z"


def _records(run_id: str, shape: str, at: str) -> list:
    """The records of a run in `shape` (finished, needs_operator, resumable), every one `at`."""
    mi = Intent(kind="model_call", step=1, attempt=1, result_id="s1-m1", at=at)
    mr = ModelCallResult(result_id="s1-m1", output={"text": None, "tool_call": {"name": "t", "args": {}}}, at=at)
    ai = Intent(kind="action", step=1, attempt=1, result_id="s1-a1", tool="t", args={}, replay="never",
                idempotency_key=idempotency_key(run_id, 1, "t", {}), at=at)
    sc = StepCompleted(step=1, result_id="s1-a1", observation="ok", at=at)
    rf = RunFinished(reason="max_steps", result=None, steps=1, at=at)
    body = {"finished": [mi, mr, ai, sc, rf], "needs_operator": [mi, mr, ai], "resumable": [mi, mr, ai, sc]}[shape]
    return [RunStarted(run_id=run_id, goal="g", at=at), *body]


def write(directory: Path, run_id: str, shape: str = "finished", at: str = T0, name: str | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / (name or f"{run_id}.jsonl")
    path.write_bytes(b"".join(encode_record(r) for r in _records(run_id, shape, at)))
    return path


def tree(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file() and not p.is_fifo()}


def test_every_run_is_summarized_as_inspect_run_judges_it(tmp_path):
    for run_id in ("finished", "needs_operator", "resumable"):
        write(tmp_path, run_id, run_id)
    corrupt = write(tmp_path, "corrupt")
    corrupt.write_bytes(corrupt.read_bytes().replace(b"\n", b"\nnot json\n", 1))
    torn = write(tmp_path, "torn", "resumable")
    torn.write_bytes(torn.read_bytes() + b'{"record":"inte')
    before = tree(tmp_path)
    runs = {s.run_id: s for s in list_runs(tmp_path)}
    assert tree(tmp_path) == before  # nothing written: no lock file, the torn tail still there
    assert set(runs) == {"finished", "needs_operator", "resumable", "corrupt", "torn"}
    for run_id, summary in runs.items():
        report = asyncio.run(inspect_run(JsonlStore(tmp_path), run_id))
        assert summary.status == report.status
        assert summary.waiting == tuple(w["kind"] for w in report.waiting)
        assert summary.reason == report.reason
        assert summary.steps == (report.recovery.completed_steps if report.recovery else 0)
        assert summary.file == f"{run_id}.jsonl"
    assert [runs[r].status for r in ("finished", "needs_operator", "resumable", "corrupt", "torn")] == [
        "finished", "needs_operator", "resumable", "corrupt", "resumable"]
    assert runs["needs_operator"].waiting == ("unknown",)
    assert runs["corrupt"].updated == T0  # the time of the last record that could be read


async def test_a_run_held_by_a_live_holder_is_active(tmp_path):
    write(tmp_path, "live", "resumable")
    store = JsonlStore(tmp_path)
    async with store.lock("live"):
        [held] = await asyncio.to_thread(list_runs, tmp_path)
    assert held.status == "active" and "held by pid" in held.reason
    [free] = await asyncio.to_thread(list_runs, tmp_path)
    assert free.status == "resumable"


async def test_it_refuses_to_block_a_running_event_loop(tmp_path):
    write(tmp_path, "r")
    with pytest.raises(RuntimeError, match="asyncio.to_thread"):
        list_runs(tmp_path)


def test_most_recent_activity_first_then_runs_without_a_time(tmp_path):
    write(tmp_path, "old", at="2026-11-30T10:00:00.000000Z")
    write(tmp_path, "new", at="2026-12-01T10:00:00.000000Z")
    write(tmp_path, "tie-b", at="2026-12-01T09:00:00.000000Z")
    write(tmp_path, "tie-a", at="2026-12-01T09:00:00.000000Z")
    write(tmp_path, "offset", at="2026-12-01T11:30:00+02:00")  # 09:30 UTC
    write(tmp_path, "no-time", at="yesterday")
    write(tmp_path, "no-utc", at="0001-01-01T00:00:00+01:00")  # ISO, but before any UTC time
    (tmp_path / "y.jsonl").mkdir()
    runs = list_runs(tmp_path)
    assert [s.run_id for s in runs] == ["new", "offset", "tie-a", "tie-b", "old", "no-time", "no-utc", "y"]
    assert runs[0].updated == "2026-12-01T10:00:00.000000Z"
    assert runs[1].updated == "2026-12-01T11:30:00+02:00"  # as written
    assert runs[-3].updated is None and runs[-3].status == "finished"
    assert runs[-2].updated is None and runs[-2].status == "finished"


def test_statuses_filter_and_unknown_ones_are_refused(tmp_path):
    for run_id in ("finished", "needs_operator", "resumable"):
        write(tmp_path, run_id, run_id)
    assert [s.run_id for s in list_runs(tmp_path, statuses=["needs_operator"])] == ["needs_operator"]
    both = list_runs(tmp_path, statuses={"finished", "resumable"})
    assert sorted(s.run_id for s in both) == ["finished", "resumable"]
    assert list_runs(tmp_path, statuses=[]) == []
    with pytest.raises(ValueError, match="unknown status waiting"):
        list_runs(tmp_path, statuses=["finished", "waiting"])


def test_entries_that_cannot_be_run_logs_are_listed_as_corrupt(tmp_path):
    write(tmp_path, "good")
    write(tmp_path, "bad name", name="bad name.jsonl")
    write(tmp_path, "hidden", name=".hidden.jsonl")
    os.mkfifo(tmp_path / "fifo.jsonl")  # an ordinary read would wait for a writer forever
    (tmp_path / "dir.jsonl").mkdir()
    os.symlink(tmp_path / "fifo.jsonl", tmp_path / "link.jsonl")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(tmp_path / "sock.jsonl"))
    raw = os.fsencode(tmp_path) + b"/caf\xe9.jsonl"  # not UTF-8
    with open(raw, "wb") as f:
        f.write(b"x")
    (tmp_path / "other.txt").write_text("not a log")
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub", "nested")  # not a run of this directory
    try:
        runs = {s.file: s for s in list_runs(tmp_path)}
    finally:
        listener.close()
    assert set(runs) == {"good.jsonl", "bad name.jsonl", ".hidden.jsonl", "fifo.jsonl", "dir.jsonl",
                         "link.jsonl", "sock.jsonl", "caf\\xe9.jsonl"}
    assert runs["good.jsonl"].status == "finished"
    reasons = {
        "bad name.jsonl": "not a safe run id",
        ".hidden.jsonl": "not a safe run id",
        "caf\\xe9.jsonl": "not a safe run id",
        "fifo.jsonl": "it is a FIFO, not a regular file",
        "link.jsonl": "it is a FIFO, not a regular file",
        "dir.jsonl": "it is a directory, not a regular file",
        "sock.jsonl": "it is a socket, not a regular file",
    }
    for file, why in reasons.items():
        s = runs[file]
        assert (s.status, s.steps, s.waiting, s.updated) == ("corrupt", 0, (), None), s
        assert s.reason.startswith("not a run log: ") and why in s.reason, s
    assert runs["caf\\xe9.jsonl"].run_id == "caf\\xe9"
    orjson.dumps([s.to_json() for s in runs.values()])  # every name can be written as JSON


def test_a_missing_or_non_directory_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        list_runs(tmp_path / "nowhere")
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError):
        list_runs(tmp_path / "file")
    (tmp_path / "empty").mkdir()
    assert list_runs(tmp_path / "empty") == []


def test_worker_processes_give_the_same_list_and_report_progress(tmp_path):
    shapes = ("finished", "needs_operator", "resumable")
    for i in range(150):
        write(tmp_path, f"r{i:03d}", shapes[i % 3], at=f"2026-12-01T08:{i // 60:02d}:{i % 60:02d}.000000Z")
    calls: list[tuple[int, int]] = []
    pooled = list_runs(tmp_path, workers=2, progress=lambda done, total: calls.append((done, total)))
    assert pooled == list_runs(tmp_path, workers=1)
    assert len(pooled) == 150 and pooled[0].run_id == "r149"
    assert calls[-1] == (150, 150) and all(t == 150 for _, t in calls)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_progress_in_process_ends_at_the_total(tmp_path):
    for i in range(3):
        write(tmp_path, f"r{i}")
    calls: list[tuple[int, int]] = []
    list_runs(tmp_path, progress=lambda done, total: calls.append((done, total)))
    assert calls == [(3, 3)]


def test_the_json_form(tmp_path):
    write(tmp_path, "w", "needs_operator")
    [summary] = list_runs(tmp_path)
    assert summary.to_json() == {
        "run_id": "w",
        "status": "needs_operator",
        "waiting": [dict(w) for w in summary.waits],
        "waiting_kinds": ["unknown"],
        "steps": 0,
        "updated": T0,
        "reason": summary.reason,
        "file": "w.jsonl",
        "target": summary.target,
        "cause": None,
    }
    assert [w["kind"] for w in summary.waits] == ["unknown"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        summary.status = "finished"  # type: ignore[misc]
    assert isinstance(summary, RunSummary)
