"""The JSONL store's file rules end to end: real kills, real FIFOs and links, the real CLI.

* Issue 10, item 1: a run killed inside a `never` tool leaves a log ending
  with that action's intent. One flipped byte inside that last line (which
  still ends with its newline) used to be taken for a torn tail: `verify`
  said OK, `inspect` resumable, and `resume` cut the line off and ran the
  action a second time. Now every reader calls it corruption at that line,
  `resume` and `mark-resolved` refuse, nothing is cut, nothing runs.
* Issue 10, item 6: a FIFO or a symbolic link named like the log makes no
  command hang and receives nothing; each command ends (under a timeout)
  with a clear one-line refusal.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

import crash_agent
import crashkit as ck

TIMEOUT = 30  # seconds for one command; each takes well under one


def _first_never_effect() -> int:
    tools = [step["tool"] for step in crash_agent.SCRIPT if "tool" in step]
    return 1 + tools.index("write")  # `write` is the agent's `never` tool


def _flip_inside(line: bytes) -> bytes:
    """`line` with one byte changed so that it no longer decodes; its newline kept."""
    assert line.endswith(b"\n")
    i = line.index(b'":') + 1  # a key's colon becomes a semicolon
    flipped = line[:i] + b";" + line[i + 1:]
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(flipped)
    return flipped


def test_a_flipped_byte_in_the_last_never_intent_is_refused_and_the_action_never_runs_again(tmp_path, reliability):
    w = ck.World(tmp_path / "w")
    n = _first_never_effect()
    assert w.child_run(kill_at=f"after:effect:{n}").killed
    lines = w.log_path.read_bytes().splitlines(keepends=True)
    last = orjson.loads(lines[-1])
    assert last["record"] == "intent" and last["replay"] == "never", last
    w.log_path.write_bytes(b"".join(lines[:-1]) + _flip_inside(lines[-1]))
    damaged, effects = w.log_path.read_bytes(), w.effects()
    assert len(effects) == n

    v = w.cli("verify", str(w.dir), "--json")
    doc = orjson.loads(v.out)
    assert v.code == 1 and doc["summary"] == {"ok": 0, "torn_tail": 0, "corrupt": 1, "bad_product": 0}, str(v)
    assert [p["line"] for p in doc["files"][0]["problems"]] == [len(lines)], doc
    assert w.inspect()["status"] == "corrupt"
    p = w.resume()
    assert p.code == 1 and "corrupt" in p.err and f"line {len(lines)}" in p.err, str(p)
    p = w.cli("mark-resolved", ck.RUN_ID, last["result_id"], "--not-executed", "--reason", "checked", "--dir", str(w.dir))
    assert p.code == 1 and "corrupt" in p.err, str(p)

    assert w.log_path.read_bytes() == damaged, "a reader or the lock changed a corrupt log"
    assert w.effects() == effects, "the never action ran again"
    assert w.tracebacks() == 0
    reliability.add("kills")
    reliability.add("processes", len(w.procs))


def _special(kind: str, path: Path, outside: Path) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "link-outside":
        path.symlink_to(outside)
    else:
        path.symlink_to("/dev/zero")


@pytest.mark.parametrize("kind", ["fifo", "link-outside", "link-dev-zero"])
def test_no_command_hangs_on_or_writes_through_a_log_that_is_not_a_regular_file(tmp_path, kind):
    runs = tmp_path / "runs"
    runs.mkdir()
    outside = tmp_path / "outside.jsonl"
    ok = ck.World(tmp_path / "source")
    assert ok.child_run().code == 0
    outside.write_bytes(ok.log_path.read_bytes())  # a valid, finished log outside the directory
    original = outside.read_bytes()
    _special(kind, runs / "x.jsonl", outside)
    what = "FIFO" if kind == "fifo" else "symbolic link"
    cli = [sys.executable, "-m", "polyloop"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run([*cli, *args], capture_output=True, text=True, timeout=TIMEOUT, cwd=tmp_path)
        except subprocess.TimeoutExpired:
            pytest.fail(f"`polyloop {' '.join(args)}` hung on a {kind}")

    done = run("verify", str(runs), "--json")
    doc = orjson.loads(done.stdout)
    assert done.returncode == 1 and doc["files"][0]["status"] == "corrupt", done
    assert what in doc["files"][0]["problems"][0]["message"]
    done = run("inspect", "x", "--dir", str(runs), "--json")
    assert orjson.loads(done.stdout)["status"] == "corrupt", done
    for args in (["resume", "x"], ["mark-resolved", "x", "s2-a1", "--not-executed", "--reason", "checked"]):
        done = run(*args, "--dir", str(runs))
        assert done.returncode == 1 and what in done.stderr and "Traceback" not in done.stderr, done
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert outside.read_bytes() == original
