"""`polyloop ls`: every run of a directory, judged as `inspect` judges it, with real processes."""

from __future__ import annotations

import json
import os
import pty
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from cli_helpers import (
    Cli,
    clean_env,
    console_script,
    one_line_error,
    renamed,
    start_slow,
    target,
    tree_digest,
)

KEYS = {"schema", "run_id", "status", "waiting", "waiting_kinds", "steps", "updated", "reason", "file", "target", "cause"}




@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The logs of one run of every kind, made once by real processes (copied by each test)."""
    where = tmp_path_factory.mktemp("template")
    cli = Cli(cwd=where, runs=where / "runs")
    assert cli("run", target("finishing"), "--goal", "g", "--run-id", "done").code == 0
    killed = cli("run", target("mailer"), "--goal", "g", "--run-id", "waits",
                 env={"POLYLOOP_TEST_KILL": "1", "POLYLOOP_TEST_EFFECTS": str(where / "effects")})
    assert killed.code == -9  # SIGKILL inside the `never` tool, after its effect: needs_operator
    assert cli("run", target("model_down"), "--goal", "g", "--run-id", "stopped").code == 1
    assert cli("run", target("finishing"), "--goal", "g", "--run-id", "broken").code == 0
    lines = cli.log("broken").read_bytes().splitlines(keepends=True)
    cli.log("broken").write_bytes(b"".join([lines[0], b"not json\n", *lines[1:]]))
    assert cli("run", target("looping"), "--goal", "g", "--run-id", "torn").code == 0
    with cli.log("torn").open("ab") as f:
        f.write(b'{"record":"inte')
    return cli.runs


@pytest.fixture
def mixed(cli: Cli, template: Path) -> Cli:
    """`cli` whose run directory holds the template's runs, and entries no run can be."""
    shutil.copytree(template, cli.runs)
    (cli.runs / "bad name.jsonl").write_bytes(cli.log("done").read_bytes())
    (cli.runs / "evil\x1b[31m.jsonl").write_text("x")
    os.mkfifo(cli.runs / "x.jsonl")  # reading it the ordinary way would wait forever
    (cli.runs / "notes.txt").write_text("not a log")
    return cli


def _last_at(log: Path) -> str:
    records = []
    for line in log.read_bytes().splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue  # a torn tail, or the line that makes a log corrupt (later records still count)
    return records[-1]["at"]


def test_ls_of_mixed_runs_agrees_with_inspect(mixed, tmp_path):
    cli = mixed
    live = start_slow(cli, "live", tmp_path / "started")
    try:
        before = tree_digest(cli.runs)
        done = cli("ls", "--dir", str(cli.runs), "--json", timeout=30)
        assert done.code == 0 and done.stderr == "", done
        runs = done.json()
        assert tree_digest(cli.runs) == before  # no lock taken, no tail sealed, nothing written
        by_id = {r["run_id"]: r for r in runs}
        assert len(by_id) == len(runs) == 9
        for run in runs:
            assert set(run) == KEYS
        expected = {"done": "finished", "waits": "needs_operator", "stopped": "resumable",
                    "broken": "corrupt", "torn": "finished", "live": "active"}
        for run_id, status in expected.items():
            inspected = cli("inspect", run_id, "--json").json()
            run = by_id[run_id]
            assert run["status"] == inspected["status"] == status, run_id
            assert run["waiting"] == inspected["waiting"], run_id  # one shape (json.md, schema 1)
            assert run["waiting_kinds"] == [w["kind"] for w in inspected["waiting"]], run_id
            assert (run["steps"], run["reason"]) == (inspected["steps"], inspected["reason"]), run_id
            assert run["file"] == f"{run_id}.jsonl"
            assert run["updated"] == _last_at(cli.log(run_id)), run_id
        assert by_id["waits"]["waiting_kinds"] == ["unknown"]
        for name, why in (("bad name", "not a safe run id"), ("evil\x1b[31m", "not a safe run id"), ("x", "FIFO")):
            run = by_id[name]
            assert run["status"] == "corrupt" and run["steps"] == 0 and run["updated"] is None, run
            assert run["reason"].startswith("not a run log:") and why in run["reason"], run
        assert cli.log("torn").read_bytes().endswith(b'{"record":"inte')
    finally:
        live.send_signal(signal.SIGINT)
        live.communicate(timeout=30)


def test_ls_is_sorted_by_last_activity_most_recent_first(mixed):
    cli = mixed
    assert cli("resume", "stopped").code == 1  # fails again: now its last record is the newest
    runs = cli("ls", "--dir", str(cli.runs), "--json", timeout=30).json()
    assert runs[0]["run_id"] == "stopped"
    timed = [r for r in runs if r["updated"] is not None]
    untimed = [r for r in runs if r["updated"] is None]
    assert runs == timed + untimed  # runs without a time come last
    assert [r["updated"] for r in timed] == sorted((r["updated"] for r in timed), reverse=True)
    assert [r["file"] for r in untimed] == sorted(r["file"] for r in untimed)


def test_the_text_lists_one_safe_line_per_run(mixed):
    cli = mixed
    done = cli("ls", "--dir", str(cli.runs), timeout=30)
    assert done.code == 0 and done.stderr == "", done
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["RUN", "STATUS", "WAITS", "FOR", "STEPS", "UPDATED", "REASON"]
    assert lines[-1] == "8 runs: 2 finished, 1 needs_operator, 1 resumable, 4 corrupt"
    rows = {line.split()[0]: line.split() for line in lines[1:-1]}
    assert rows["waits"][1:4] == ["needs_operator", "unknown", "0"]
    assert rows["done"][1:4] == ["finished", "-", "2"]
    assert rows["stopped"][1] == "resumable"
    assert "\x1b" not in done.stdout and "evil\\x1b[31m" in done.stdout  # the name is shown, inert
    assert len(lines) == 1 + 8 + 1


def test_status_filters_and_repeats(mixed):
    cli = mixed
    where = ["--dir", str(cli.runs), "--json"]
    waiting = cli("ls", *where, "--status", "needs_operator", timeout=30).json()
    assert [r["run_id"] for r in waiting] == ["waits"]
    both = cli("ls", *where, "--status", "resumable", "--status", "finished", timeout=30).json()
    assert sorted(r["run_id"] for r in both) == ["done", "stopped", "torn"]
    assert cli("ls", *where, "--status", "active", timeout=30).json() == []
    text = cli("ls", "--dir", str(cli.runs), "--status", "active", timeout=30)
    assert text.code == 0 and text.stdout.strip() == f"no runs with status active in {cli.runs}"


def test_an_unknown_status_is_a_usage_error(cli):
    cli.runs.mkdir()
    done = cli("ls", "--dir", str(cli.runs), "--status", "waiting")
    assert done.code == 2 and done.stdout == ""
    assert "'waiting' is not one of" in one_line_error(done)
    done = cli("ls", "--dir", str(cli.runs), "--status", "waiting", "--json")
    assert done.code == 2 and done.json()["error"]["type"] == "UsageError"


def test_a_directory_that_cannot_be_listed_exits_2(cli, tmp_path):
    done = cli("ls", "--dir", str(tmp_path / "nowhere"))
    assert done.code == 2 and "cannot list runs" in one_line_error(done)
    (tmp_path / "file").write_text("x")
    done = cli("ls", "--dir", str(tmp_path / "file"), "--json")
    assert done.code == 2 and done.json()["error"]["type"] == "BadInput"


def test_an_empty_directory_lists_nothing(cli):
    cli.runs.mkdir()
    assert cli("ls", "--dir", str(cli.runs), "--json").json() == []
    done = cli("ls", "--dir", str(cli.runs))
    assert done.code == 0 and done.stdout.strip() == f"no runs in {cli.runs}"
    # Without --dir, ls looks where every command looks: $POLYLOOP_DIR, else ./runs.
    assert cli("run", target("finishing"), "--goal", "g", "--run-id", "here").code == 0
    assert [r["run_id"] for r in cli("ls", "--json").json()] == ["here"]
    other = cli.cwd / "elsewhere"
    other.mkdir()
    done = cli("ls", "--json", env={"POLYLOOP_DIR": str(other)})
    assert done.code == 0 and done.json() == []


def _many(cli: Cli, tmp_path: Path, count: int) -> Path:
    assert cli("run", target("finishing"), "--goal", "g", "--run-id", "seed").code == 0
    seed = cli.log("seed").read_bytes()
    many = tmp_path / "many"
    many.mkdir()
    for i in range(count):
        (many / f"r{i}.jsonl").write_bytes(renamed(seed, "seed", f"r{i}"))
    return many


def _on_a_terminal(*args: str) -> tuple[subprocess.Popen[bytes], int]:
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [*console_script(), *args], stdout=subprocess.PIPE, stderr=slave,
        stdin=subprocess.DEVNULL, env=clean_env(), start_new_session=True,
    )
    os.close(slave)
    return proc, master


def _drain(master: int, into: list[bytes]) -> None:
    """Read the terminal until every writer has closed it (so the bar never blocks on a full pty)."""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the last writer is gone
            return
        if not chunk:
            return
        into.append(chunk)


def _on_a_terminal_until_done(*args: str) -> tuple[int, bytes, bytes]:
    """Run polyloop with stderr on a pseudo-terminal; its exit code, stdout and terminal output."""
    proc, master = _on_a_terminal(*args)
    chunks: list[bytes] = []
    reader = threading.Thread(target=_drain, args=(master, chunks), daemon=True)
    reader.start()
    try:
        out, _ = proc.communicate(timeout=120)
        reader.join(timeout=10)
    finally:
        os.close(master)
    return proc.returncode, out, b"".join(chunks)


def test_a_long_listing_shows_progress_on_a_terminal_but_not_in_json_mode(cli, tmp_path):
    many = _many(cli, tmp_path, 3000)
    code, out, seen = _on_a_terminal_until_done("ls", "--dir", str(many))
    assert code == 0
    assert b"reading runs" in seen and b"3000" in seen
    assert out.decode().splitlines()[-1] == "3000 runs: 3000 finished"

    code, out, seen = _on_a_terminal_until_done("ls", "--dir", str(many), "--json")
    assert code == 0 and b"reading runs" not in seen
    assert len(json.loads(out)) == 3000

    # Ctrl-C reaches the whole foreground group: ls and its workers stop, with 130.
    proc, master = _on_a_terminal("ls", "--dir", str(many))
    chunks: list[bytes] = []
    reader = threading.Thread(target=_drain, args=(master, chunks), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 60
        while b"reading runs" not in b"".join(chunks) and proc.poll() is None:
            assert time.monotonic() < deadline, "no progress bar"
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
        reader.join(timeout=10)  # EOF only once every worker has closed the terminal too
        assert not reader.is_alive(), "a worker outlived ls"
    finally:
        os.close(master)
    assert proc.returncode == 130, out
    assert b"interrupted" in b"".join(chunks)
