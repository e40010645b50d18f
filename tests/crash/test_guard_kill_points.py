"""Kill points inside the guards: a real SIGKILL inside precondition, verify, rollback and reconcile.

Each scenario runs examples/transfer.py through the `polyloop` CLI against its
SQLite bank, killing the process at the given points (one per invocation),
then recovers as an operator would: resume; on exit 3 settle what waits by
the ground truth (the bank), resume again. Then the audit:

* no transfer or refund reached the bank twice unless the log shows an
  operator or reconcile said the earlier one did not execute;
* no transfer whose precondition failed reached the bank;
* every failed verification was announced (an ALERT line of some command);
* the books balance: alice + bob hold the 1000 they started with.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
from pathlib import Path

import pytest
from support.cli import console_script, polyloop_in_process
from support import forking

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RUN = "guarded"


class World:
    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "examples").symlink_to(EXAMPLES, target_is_directory=True)
        self.bank = root / "bank.sqlite"
        self.stderr: list[str] = []

    def cli(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("POLYLOOP_", "TRANSFER_", "PYTEST_"))}
        if args[0] in ("inspect", "mark-resolved"):  # reading and settling: in this process, no agent runs
            inproc = polyloop_in_process(*args, "--dir", "runs", cwd=self.root, env={**base, "BANK_DB": str(self.bank)})
            done = subprocess.CompletedProcess(list(args), inproc.code, inproc.stdout, inproc.stderr)
        else:  # run and resume: a real process, which TRANSFER_CRASH kills
            done = forking.run([*console_script(), *args, "--dir", "runs"], cwd=self.root, capture_output=True,
                                  text=True, timeout=60, env={**base, "BANK_DB": str(self.bank), **env},
                                  stdin=subprocess.DEVNULL)
        self.stderr.append(done.stderr)
        return done

    def rows(self, sql: str) -> list[tuple]:
        db = sqlite3.connect(self.bank)
        try:
            return db.execute(sql).fetchall()
        finally:
            db.close()

    def log(self) -> list[dict]:
        return [json.loads(line) for line in (self.root / "runs" / f"{RUN}.jsonl").read_text().splitlines()]


# (id, the crash point of each invocation in turn, the skim of the bank)
SCENARIOS = [
    ("in-precondition", ["before_precondition"], "0"),
    ("after-the-transfer", ["after_transfer"], "0"),
    ("in-verify", ["in_verify"], "0"),
    ("in-verify-that-fails", ["in_verify"], "1"),
    ("before-the-refund", ["before_refund"], "1"),
    ("in-the-refund", ["in_refund"], "1"),
    ("in-reconcile", ["after_transfer", "in_reconcile"], "0"),
    ("in-reconcile-then-verify-fails", ["after_transfer", "in_reconcile"], "1"),
    ("twice-in-the-refund", ["in_refund", None, "in_refund"], "1"),
]


def settle_by_ground_truth(w: World) -> None:
    doc = json.loads(w.cli("inspect", RUN, "--json").stdout)
    for wait in doc["waiting"]:
        e = next(x for x in doc["executions"] if x["id"] == wait["id"])
        table = "refunds" if e["kind"] == "rollback" else "transfers"
        happened = w.rows(f"SELECT count(*) FROM {table} WHERE key = '{e['idempotency_key']}'") != [(0,)]
        flag = "--executed" if happened else "--not-executed"
        assert w.cli("mark-resolved", RUN, wait["id"], flag, "--reason", "the bank says so").returncode == 0


@pytest.mark.parametrize(("points", "skim"), [s[1:] for s in SCENARIOS], ids=[s[0] for s in SCENARIOS])
def test_a_kill_inside_a_guard_is_recovered_and_audited(tmp_path: Path, points: list, skim: str) -> None:
    w = World(tmp_path)
    first = w.cli("run", "examples/transfer.py:agent", "--run-id", RUN, "--goal", "pay bob 800 from alice",
                  TRANSFER_CRASH=points[0], TRANSFER_SKIM=skim)
    assert first.returncode == -signal.SIGKILL, first.stderr
    for point in points[1:]:
        done = w.cli("resume", RUN, TRANSFER_SKIM=skim, **({"TRANSFER_CRASH": point} if point else {}))
        if done.returncode == 3:
            settle_by_ground_truth(w)
    for _ in range(4):
        done = w.cli("resume", RUN, TRANSFER_SKIM=skim)
        if done.returncode != 3:
            break
        settle_by_ground_truth(w)
    assert done.returncode == 0, done.stderr
    audit(w)


def audit(w: World) -> None:
    log = w.log()
    res = {r["result_id"]: r for r in log if r["record"] == "resolution"}
    intents = [r for r in log if r["record"] == "intent" and r["kind"] in ("action", "rollback")]
    for what, kind in (("transfer", "action"), ("refund", "rollback")):
        reached = w.rows(f"SELECT key, attempt FROM requests WHERE what = '{what}'")
        allowed = 1 + sum(1 for i in intents if i["kind"] == kind
                          and res.get(i["result_id"], {}).get("outcome") == "not_executed")
        assert len(reached) <= allowed, f"{what} reached the bank {len(reached)} times, allowed {allowed}"
    for check in (r for r in log if r["record"] == "guard_check" and r["guard"] == "precondition"):
        if not check["passed"]:
            attempt = int(check["result_id"].split("-a")[1])
            assert not w.rows(f"SELECT 1 FROM requests WHERE what = 'transfer' AND attempt = {attempt}")
    for check in (r for r in log if r["record"] == "guard_check" and r["guard"] == "verify" and not r["passed"]):
        assert any(f"ALERT: transfer ({check['result_id']})" in err for err in w.stderr), "an alert went unannounced"
    assert sum(b for (b,) in w.rows("SELECT balance FROM accounts")) == 1000
