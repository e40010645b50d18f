"""Logs that are not regular files: FIFOs, symbolic links, devices, directories (issue 10, item 6).

None of them may make a reader hang, eat memory, or receive an append; each
is refused with a clear message and `verify` reports each one. A real FIFO
blocks `open(O_RDONLY)` until a writer comes, so every test runs under a
watchdog: a regression fails with "hung" instead of hanging the suite.
"""

from __future__ import annotations

import os
import signal
import stat
import threading
from pathlib import Path

import pytest

from polyloop import (
    CorruptLogError,
    Intent,
    RunExistsError,
    RunStarted,
    StoreError,
    encode_record,
    inspect_run,
    verify_file,
    verify_logs,
)
from support.watchdog import WATCHDOG, Hung, watchdog  # noqa: F401  (autouse: every test here runs under it)

MI = Intent(kind="model_call", step=1, attempt=1, result_id="s1-m1")
LOG = encode_record(RunStarted(run_id="r", goal="g")) + encode_record(MI)


@pytest.fixture
def outside(tmp_path) -> Path:
    """A valid log outside the run directory, which a link in it points to."""
    path = tmp_path / "elsewhere" / "victim.jsonl"
    path.parent.mkdir()
    path.write_bytes(LOG)
    return path


def make(kind: str, path: Path, outside: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "link-outside":
        path.symlink_to(outside)
    elif kind == "link-dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "dangling-link":
        path.symlink_to(path.parent / "nothing-here")
    elif kind == "directory":
        path.mkdir()
    else:
        raise ValueError(kind)


KINDS = {
    "fifo": "is a FIFO",
    "link-outside": "is a symbolic link",
    "link-dev-zero": "is a symbolic link",
    "dangling-link": "is a symbolic link",
    "directory": "is a directory",
}


@pytest.mark.parametrize("kind", sorted(KINDS))
async def test_reading_refuses_it_as_corrupt_without_blocking(store, outside, kind):
    make(kind, store.path("r"), outside)
    with pytest.raises(CorruptLogError, match=KINDS[kind]):
        await store.read_log("r")
    parsed = await store.read_parsed("r")
    assert not parsed.records and parsed.problems[0].line is None and KINDS[kind] in parsed.problems[0].message
    report = await inspect_run(store, "r")
    assert report.status == "corrupt" and KINDS[kind] in report.reason


@pytest.mark.parametrize("kind", sorted(KINDS))
async def test_the_lock_yields_it_as_corrupt_and_changes_nothing(store, outside, kind):
    make(kind, store.path("r"), outside)
    async with store.lock("r") as parsed:
        assert parsed is not None and KINDS[kind] in parsed.problems[0].message
        with pytest.raises(StoreError, match="not a regular file|symbolic link|FIFO|directory"):
            await store.write_intent("r", MI)
    assert outside.read_bytes() == LOG
    assert os.path.lexists(store.path("r"))


@pytest.mark.parametrize("kind", sorted(KINDS))
async def test_appends_never_go_through_it(store, outside, kind):
    make(kind, store.path("r"), outside)
    for write in (store.write_intent("r", MI), store.write_model_call_result("r", _result())):
        with pytest.raises(StoreError, match="not a regular file"):
            await write
    assert outside.read_bytes() == LOG  # the file outside the directory received nothing


@pytest.mark.parametrize("kind", sorted(KINDS))
async def test_a_new_run_does_not_replace_it(store, outside, kind):
    make(kind, store.path("r"), outside)
    assert store.exists("r")
    with pytest.raises(RunExistsError):
        await store.write_run_started(RunStarted(run_id="r", goal="g"))
    assert outside.read_bytes() == LOG


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_verify_reports_each_one_as_corrupt(tmp_path, outside, kind):
    runs = tmp_path / "runs"
    make(kind, runs / "bad.jsonl", outside)
    (runs / "good.jsonl").write_bytes(encode_record(RunStarted(run_id="good", goal="g")))
    report = verify_logs(runs, workers=1)
    by_name = {Path(f.path).name: f for f in report.files}
    assert set(by_name) == {"bad.jsonl", "good.jsonl"}
    assert by_name["good.jsonl"].status == "ok"
    bad = by_name["bad.jsonl"]
    assert bad.status == "corrupt" and bad.problems[0][0] is None and KINDS[kind] in bad.problems[0][1]
    assert verify_file(runs / "bad.jsonl") == bad


async def test_list_runs_names_only_regular_logs_with_safe_ids(store, outside):
    assert await store.list_runs() == []  # no directory yet
    for kind in KINDS:
        make(kind, store.directory / f"{kind}.jsonl", outside)
    for name in ("b", "a", "c.d"):
        (store.directory / f"{name}.jsonl").write_bytes(LOG)
    (store.directory / ".hidden.jsonl").write_bytes(LOG)
    (store.directory / "x.json").write_bytes(LOG)
    (store.directory / ".a.lock").write_bytes(b"")
    assert await store.list_runs() == ["a", "b", "c.d"]


@pytest.mark.parametrize("kind", ["fifo", "link-outside", "directory"])
async def test_a_lock_file_that_is_not_a_regular_file_is_refused(store, outside, kind):
    store.directory.mkdir(parents=True)
    make(kind, store.directory / ".r.lock", outside)
    assert store.holder("r") is None
    with pytest.raises(StoreError, match="lock"):
        async with store.lock("r"):
            pass
    assert outside.read_bytes() == LOG  # never truncated nor written with a holder's name


async def test_a_fifo_with_a_writer_attached_is_still_refused(store):
    # With a writer holding the FIFO open, a blocking open would not even
    # block; the refusal must come from the file's type, not from luck.
    make("fifo", store.path("r"), Path())
    fd = os.open(store.path("r"), os.O_RDWR | os.O_NONBLOCK)
    try:
        os.write(fd, LOG)
        with pytest.raises(CorruptLogError, match="is a FIFO"):
            await store.read_log("r")
    finally:
        os.close(fd)


def test_the_watchdog_turns_a_real_hang_into_a_failure(tmp_path):
    # What a regression would do: a plain blocking open of a FIFO. It must fail, not hang.
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    signal.setitimer(signal.ITIMER_REAL, 0.2)
    with pytest.raises(Hung):
        os.open(fifo, os.O_RDONLY)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and threading.current_thread() is threading.main_thread()


def _result():
    from polyloop import ModelCallResult

    return ModelCallResult(result_id="s1-m1", output={"text": "hi", "tool_call": None})
