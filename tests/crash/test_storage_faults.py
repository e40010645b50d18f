"""Storage faults: a full disk, a failing fsync, a read-only directory, a log replaced under the run.

Each time the run must stop with a clear error (fail closed), the log must
stay readable (`verify --strict` passes: no torn tail, no corruption) and
hold exactly the records written before the fault, and once the cause is
gone the run must resume through the CLI and end as the uninterrupted run
would. A write that failed is, for recovery, the same as a kill just before
it — which is what the audit checks.

Full disk and failing fsync use the store's fault-injection seam (a `Disk`
subclass given to the store, see `crash_child.py`) at every kind of write:
half the record's bytes land, then ENOSPC; or the whole record lands and
fsync fails with EIO. A real full disk (a
small tmpfs filled to the last byte, see `full_disk.py`) and a real
read-only directory (a read-only bind mount) come from a private user+mount
namespace (`unshare -rm`); without one, the read-only tests fall back to
file modes when not running as root.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest

import crashkit as ck
from polyloop import JsonlStore, RunNotFoundError, inspect_run
from polyloop.stores import parse_log
from polyloop.testing import logical

ENOSPC = "No space left on device"
EIO = "Input/output error"

FAULTS = [
    *(f"enospc:{k}" for k in ("run_started:1", "intent:model_call:2", "model_call_result:2",
                              "intent:action:2", "step_completed:2", "run_finished:1")),
    *(f"eio-fsync:{k}" for k in ("run_started:1", "intent:model_call:2", "intent:action:2",
                                 "run_finished:1")),
    "enospc:resolution:1",
]


@dataclass
class Outcome:
    fault: str
    kills: int = 0
    error: str | None = None
    tracebacks: int = 0
    processes: int = 0


def _status(w: ck.World) -> str:
    try:
        return asyncio.run(inspect_run(JsonlStore(w.dir), ck.RUN_ID)).status
    except RunNotFoundError:
        return "absent"


def _golden_prefix(golden: ck.Golden, point: str) -> list:
    key, _, n = point.rpartition(":")
    i = next(i for i, (kind, k, m, _) in enumerate(golden.events) if kind == "write" and k == key and m == int(n))
    return [r for kind, _, _, r in golden.events[:i] if kind == "write"]


def fault_scenario(golden: ck.Golden, root, fault: str) -> Outcome:
    w = ck.World(root / fault.replace(":", "_"))
    out = Outcome(fault)
    kind, _, where = fault.partition(":")
    message = ENOSPC if kind == "enospc" else EIO
    try:
        if where == "resolution:1":
            n = 1 + next(i for i, e in enumerate(golden.effects) if golden.replay[e["tool"]] == "never")
            assert w.child_run(kill_at=f"after:effect:{n}").killed
            out.kills += 1
            before = w.log_path.read_bytes()
            e = golden.effects[n - 1]
            p = w.child_resolve(e["result_id"], True, e["observation"], fault=fault)
            assert p.code == 1 and message in p.err and str(w.log_path) in p.err, str(p)
            assert w.log_path.read_bytes() == before, "a failed resolution left bytes behind"
            expected = ck.expect(golden, f"after:effect:{n}")
        else:
            p = w.child_run(fault=fault)
            assert p.code == 1, f"the run did not stop on {fault}:\n{p}"
            assert message in p.err and str(w.dir) in p.err, f"unclear error:\n{p}"
            expected = ck.expect(golden, f"before:{where}")
            if expected.status_after_crash == "absent":
                assert not w.log_path.exists()
                assert not [f for f in os.listdir(w.dir) if f.endswith((".tmp", ".jsonl"))], os.listdir(w.dir)
            else:
                parsed = parse_log(w.log_path.read_bytes())
                assert not parsed.problems and parsed.torn_line is None, parsed
                assert w.log_path.read_bytes().endswith(b"\n")
                assert logical(parsed.records) == logical(_golden_prefix(golden, where))
        assert _status(w) == expected.status_after_crash
        w.recover()
        ck.audit(golden, w, expected)
    except Exception:  # reported per scenario by its own test
        out.error = traceback.format_exc()
    finally:
        out.tracebacks = w.tracebacks()
        out.processes = len(w.procs)
    return out


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    return ck.golden_run(tmp_path_factory.mktemp("golden"))


@pytest.fixture(scope="module")
def faults(golden, tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    with ThreadPoolExecutor(max(2, (os.cpu_count() or 2) + 1)) as pool:
        outcomes = {o.fault: o for o in pool.map(lambda f: fault_scenario(golden, root, f), FAULTS)}
    ck.World(root / "verify").verify_all(root)
    return outcomes


@pytest.mark.parametrize("fault", FAULTS)
def test_a_failing_write_stops_the_run_and_loses_nothing(faults, fault, reliability):
    out = faults[fault]
    reliability.add("kills", out.kills)
    reliability.add("processes", out.processes)
    reliability.add("tracebacks", out.tracebacks)
    assert out.error is None, out.error
    assert out.tracebacks == 0
    reliability.add("storage.faults_injected")
    reliability.add("runs_recovered")


# -- a read-only directory, for real ---------------------------------------------------------

_NS_RO = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'


def _readonly_mode() -> str | None:
    if shutil.which("unshare"):
        probe = subprocess.run(
            ["unshare", "-rm", "sh", "-c",
             'd=$(mktemp -d) && mount --bind "$d" "$d" && mount -o remount,bind,ro "$d" && ! touch "$d/x"'],
            capture_output=True,
        )
        if probe.returncode == 0:
            return "namespace"
    if os.geteuid() != 0:
        return "chmod"
    return None


MODE = _readonly_mode()
needs_ro = pytest.mark.skipif(
    MODE is None, reason="no way to make a read-only directory here: needs `unshare -rm` or a non-root user"
)
REFUSED = {"namespace": "Read-only file system", "chmod": "Permission denied"}


def _read_only(w: ck.World, args: list[str]) -> ck.Proc:
    """Run `args` with the run directory read-only."""
    if MODE == "namespace":
        return w.call(["unshare", "-rm", "sh", "-c", _NS_RO, str(w.dir), *args])
    paths = [w.dir, *w.dir.iterdir()]
    modes = {p: p.stat().st_mode for p in paths}
    for p in paths:
        p.chmod(0o555 if p.is_dir() else 0o444)
    try:
        return w.call(args)
    finally:
        for p, mode in modes.items():
            p.chmod(mode)


@needs_ro
def test_a_read_only_directory_refuses_a_new_run_before_anything_runs(golden, tmp_path, reliability):
    w = ck.World(tmp_path / "w")
    w.dir.mkdir()
    p = _read_only(w, [*ck.CLI, "run", w.target, "--run-id", ck.RUN_ID, "--goal", ck.GOAL, "--dir", str(w.dir)])
    assert p.code == 1 and REFUSED[MODE] in p.err and str(w.dir) in p.err, str(p)
    assert not w.log_path.exists()
    assert w.ledger() == [] and w.effects() == [], "something ran without a log to record it"
    assert w.recover() == ["run:0"]  # writable again: the same command works
    ck.audit(golden, w, ck.expect(golden, "after:run_finished:1"))
    assert w.tracebacks() == 0
    reliability.add("storage.faults_injected")
    reliability.add("processes", len(w.procs))


@needs_ro
def test_a_crashed_run_in_a_read_only_directory_is_readable_and_resumes_once_writable(
    golden, tmp_path, reliability
):
    w = ck.World(tmp_path / "w")
    n = 1 + next(i for i, e in enumerate(golden.effects) if golden.replay[e["tool"]] == "never")
    assert w.child_run(kill_at=f"after:effect:{n}").killed
    before = w.log_path.read_bytes()
    rid = golden.effects[n - 1]["result_id"]

    # Reading needs no writes: inspect and verify work on the read-only directory.
    p = _read_only(w, [*ck.CLI, "inspect", ck.RUN_ID, "--dir", str(w.dir), "--json"])
    assert p.code == 0 and '"needs_operator"' in p.out, str(p)
    p = _read_only(w, [*ck.CLI, "verify", str(w.dir), "--strict"])
    assert p.code == 0, str(p)
    # Resume may say an operator is needed (nothing to write for that) or
    # that it cannot take the run's lock; either way it names the cause.
    p = _read_only(w, [*ck.CLI, "resume", ck.RUN_ID, "--dir", str(w.dir)])
    assert (p.code == 3 and rid in p.err) or (p.code == 1 and REFUSED[MODE] in p.err), str(p)
    # Writing is refused with the cause named, and nothing changes.
    p = _read_only(w, [*ck.CLI, "mark-resolved", ck.RUN_ID, rid, "--not-executed", "--reason", "checked", "--dir", str(w.dir)])
    assert p.code == 1 and REFUSED[MODE] in p.err, str(p)
    assert w.log_path.read_bytes() == before
    w.settle()  # writable: the operator settles it
    settled = w.log_path.read_bytes()
    p = _read_only(w, [*ck.CLI, "resume", ck.RUN_ID, "--dir", str(w.dir)])
    assert p.code == 1 and REFUSED[MODE] in p.err, str(p)
    assert w.log_path.read_bytes() == settled

    assert w.recover() == ["resume:0"]
    ck.audit(golden, w, ck.expect(golden, f"after:effect:{n}"))
    assert w.tracebacks() == 0
    reliability.add("kills")
    reliability.add("runs_recovered")
    reliability.add("storage.faults_injected")
    reliability.add("processes", len(w.procs))


@needs_ro
def test_a_directory_turning_read_only_mid_run_does_not_stop_a_held_log(golden, tmp_path, reliability):
    # While a run is held its log stays open, and a file opened for writing
    # stays writable when its directory or mount turns read-only: the run
    # goes on, every record lands durably, and the log is whole. (A write
    # that really fails - a full disk, an I/O error - stops the run: the
    # tests above.) Nothing new can be created there meanwhile.
    w = ck.World(tmp_path / "w")
    w.dir.mkdir()
    n = 1 + next(i for i, e in enumerate(golden.effects) if golden.replay[e["tool"]] == "never")
    args = [*ck.CLI, "run", w.target, "--run-id", ck.RUN_ID, "--goal", ck.GOAL, "--dir", str(w.dir)]
    if MODE == "namespace":
        p = w.call(["unshare", "-rm", *args], env={"POLYLOOP_AT_EFFECT": f"{n}:mount-ro"})
    else:
        p = w.call(args, env={"POLYLOOP_AT_EFFECT": f"{n}:chmod-ro"})
        w.dir.chmod(0o755)
        w.log_path.chmod(0o644)
    assert p.code == 0, str(p)
    parsed = parse_log(w.log_path.read_bytes())
    assert not parsed.problems and parsed.torn_line is None
    ck.audit(golden, w, None)
    w.verify()
    assert w.tracebacks() == 0
    reliability.add("storage.faults_injected")
    reliability.add("processes", len(w.procs))


# -- the log file replaced or removed under a live run ------------------------------------------


def _run_with(w: ck.World, action: str, **env: str) -> ck.Proc:
    return w.call([*ck.CLI, "run", w.target, "--run-id", ck.RUN_ID, "--goal", ck.GOAL, "--dir", str(w.dir)],
                  env={"POLYLOOP_AT_EFFECT": action, **env})


def test_a_log_replaced_under_the_run_stops_it_and_the_run_resumes(golden, tmp_path, reliability):
    w = ck.World(tmp_path / "w")
    n = 1 + next(i for i, e in enumerate(golden.effects) if golden.replay[e["tool"]] == "never")
    p = _run_with(w, f"{n}:replace-log")
    assert p.code == 1 and "replaced under the run" in p.err, str(p)
    parsed = parse_log(w.log_path.read_bytes())
    assert not parsed.problems and parsed.torn_line is None
    w.recover()
    ck.audit(golden, w, ck.expect(golden, f"after:effect:{n}"))
    w.verify()
    assert w.tracebacks() == 0
    reliability.add("runs_recovered")
    reliability.add("storage.faults_injected")
    reliability.add("processes", len(w.procs))


def test_another_runs_log_swapped_in_is_never_written_nor_resumed(golden, tmp_path, reliability):
    other = ck.World(tmp_path / "other")
    assert other.child("run", other.target, "other-run", ck.GOAL, str(other.dir)).code == 0
    foreign = other.dir / "other-run.jsonl"
    w = ck.World(tmp_path / "w", extra_env={"POLYLOOP_FOREIGN_LOG": str(foreign)})
    p = _run_with(w, "1:swap-log-foreign")
    assert p.code == 1 and "replaced under the run" in p.err, str(p)
    assert w.log_path.read_bytes() == foreign.read_bytes(), "a record went into another run's log"
    p = w.resume()
    assert p.code == 1 and "corrupt" in p.err and "other-run" in p.err, str(p)
    v = w.cli("verify", str(w.dir), "--json")
    assert v.code == 1 and '"corrupt"' in v.out, str(v)
    assert w.log_path.read_bytes() == foreign.read_bytes()
    # Putting the run's own log back makes it resumable, with nothing lost:
    # the held log was still open, so the step record after the effect
    # landed in it; the next intent found the path taken and went nowhere.
    os.replace(w.log_path.with_name(w.log_path.name + ".orig"), w.log_path)
    w.recover()
    ck.audit(golden, w, ck.expect(golden, "before:intent:model_call:2"))
    assert w.tracebacks() == 0
    reliability.add("runs_recovered")
    reliability.add("storage.faults_injected")
    reliability.add("processes", len(w.procs) + len(other.procs))


def test_a_log_removed_under_the_run_stops_it(golden, tmp_path, reliability):
    w = ck.World(tmp_path / "w")
    p = _run_with(w, "1:remove-log")
    assert p.code == 1 and "no longer exists" in p.err, str(p)
    assert not w.log_path.exists()
    p = w.resume()
    assert p.code == 2 and "no run" in p.err, str(p)
    assert w.tracebacks() == 0
    reliability.add("storage.faults_injected")
    reliability.add("processes", len(w.procs))


@pytest.mark.skipif(MODE != "namespace", reason="a real full disk needs `unshare -rm` (a small private tmpfs)")
def test_a_really_full_disk_cuts_a_write_short_and_the_run_stops_cleanly(tmp_path, reliability):
    # The seam-based ENOSPC above, for real: a tmpfs filled to the last byte
    # by the tool, a step record the kernel writes only partly, then ENOSPC.
    done = subprocess.run(["unshare", "-rm", sys.executable, str(ck.HERE / "full_disk.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    lines = done.stdout.strip().splitlines()
    result = json.loads(lines[-1]) if lines else {"ok": False, "error": done.stderr}
    assert done.returncode == 0 and result["ok"], result.get("error")
    assert result["tracebacks"] == 0
    reliability.add("runs_recovered")
    reliability.add("storage.faults_injected")
    reliability.add("processes", result["processes"])
