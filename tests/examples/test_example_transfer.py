"""examples/transfer.py: guarded transfers against a SQLite bank outside the agent process.

Every scenario runs the real `polyloop` CLI in child processes; crashes are the
tool (or guard) killing its own process with SIGKILL at the named point. The
bank is read by this test process, not by the agent: what it says is the world.
"""

from __future__ import annotations

import json
import signal
import sqlite3
from pathlib import Path

import pytest
from example_helpers import Runner

GOAL = "pay bob 800 from alice"


@pytest.fixture
def bank(workdir: Path) -> Path:
    path = workdir / "bank.sqlite"
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE accounts (name TEXT PRIMARY KEY, balance INTEGER NOT NULL);"
        "CREATE TABLE transfers (key TEXT PRIMARY KEY, src TEXT, dst TEXT, amount INTEGER, credited INTEGER);"
        "CREATE TABLE refunds (key TEXT PRIMARY KEY, transfer TEXT);"
        "CREATE TABLE requests (what TEXT, key TEXT, attempt INTEGER);"
        "INSERT INTO accounts VALUES ('alice', 1000), ('bob', 0);"
    )
    db.commit()
    db.close()
    return path


def query(bank: Path, sql: str, *args: object) -> list[tuple]:
    db = sqlite3.connect(bank)
    try:
        return db.execute(sql, args).fetchall()
    finally:
        db.close()


def balances(bank: Path) -> dict[str, int]:
    return dict(query(bank, "SELECT name, balance FROM accounts"))


def env(bank: Path, **extra: str) -> dict[str, str]:
    return {"BANK_DB": str(bank), **extra}


def run(polyloop: Runner, bank: Path, run_id: str, **extra: str):
    return polyloop("run", "examples/transfer.py:agent", "--run-id", run_id, "--goal", GOAL,
                    "--dir", "runs", env=env(bank, **extra))


def inspect(polyloop: Runner, bank: Path, run_id: str) -> dict:
    done = polyloop("inspect", run_id, "--dir", "runs", "--json", env=env(bank))
    assert done.returncode in (0, 3), done.stderr
    return json.loads(done.stdout)


def action(doc: dict, rid: str = "s1-a1") -> dict:
    return next(e for e in doc["executions"] if e["id"] == rid)


def test_a_clean_transfer_checks_and_verifies(polyloop: Runner, bank: Path) -> None:
    done = run(polyloop, bank, "clean")
    assert done.returncode == 0, done.stderr
    assert balances(bank) == {"alice": 200, "bob": 800}
    doc = inspect(polyloop, bank, "clean")
    a = action(doc)
    assert a["state"] == "done"
    assert a["precondition"]["passed"] and a["verification"]["passed"]
    assert a["guards"] == {"precondition": True, "verify": True, "rollback": "compensate",
                           "reconcile": True, "irreversible": False}
    assert doc["waiting"] == [] and "ALERT" not in done.stderr


def test_a_crash_after_the_intent_then_a_balance_drop_means_no_overdraft(polyloop: Runner, bank: Path) -> None:
    done = run(polyloop, bank, "drop", TRANSFER_CRASH="before_precondition")
    assert done.returncode == -signal.SIGKILL
    doc = inspect(polyloop, bank, "drop")
    assert action(doc)["state"] == "pending"  # the intent is durable, the precondition never recorded
    assert doc["status"] == "resumable" and doc["waiting"] == []
    query_commit(bank, "UPDATE accounts SET balance = 500 WHERE name = 'alice'")  # the world moves on

    done = polyloop("resume", "drop", "--dir", "runs", env=env(bank))
    assert done.returncode == 0, done.stderr
    assert balances(bank) == {"alice": 500, "bob": 0}
    assert query(bank, "SELECT count(*) FROM transfers") == [(0,)]
    a = action(inspect(polyloop, bank, "drop"))
    assert a["precondition"] == {"passed": False, "reason": "alice holds 500, less than 800",
                                 "at": a["precondition"]["at"]}
    assert a["is_error"] and "did not run: its precondition failed" in a["observation"]


def test_a_failed_verification_alerts_and_compensates_once(polyloop: Runner, bank: Path) -> None:
    done = run(polyloop, bank, "skim", TRANSFER_SKIM="1")
    assert done.returncode == 0, done.stderr  # the compensation undid it: the run went on
    assert "ALERT" in done.stderr and "bob was credited 799, not 800" in done.stderr
    assert balances(bank) == {"alice": 1000, "bob": 0}
    assert query(bank, "SELECT count(*) FROM refunds") == [(1,)]
    doc = inspect(polyloop, bank, "skim")
    a = action(doc)
    assert a["state"] == "rolled_back" and a["rollbacks"] == ["s1-r1"]
    assert a["verification"]["rollback"] == "compensate"
    assert "rolled back (compensate)" in a["observation"]
    rollback = action(doc, "s1-r1")
    assert rollback["kind"] == "rollback" and rollback["idempotency_key"] == a["idempotency_key"] + "-rollback"


def test_a_crash_inside_the_compensation_stops_for_an_operator(polyloop: Runner, bank: Path) -> None:
    done = run(polyloop, bank, "refund", TRANSFER_SKIM="1", TRANSFER_CRASH="in_refund")
    assert done.returncode == -signal.SIGKILL
    done = polyloop("resume", "refund", "--dir", "runs", env=env(bank))
    assert done.returncode == 3, done.stderr
    assert query(bank, "SELECT count(*) FROM refunds") == [(1,)]  # never silently repeated
    doc = inspect(polyloop, bank, "refund")
    assert doc["status"] == "needs_operator"
    assert [(w["id"], w["kind"]) for w in doc["waiting"]] == [("s1-r1", "unknown")]
    assert "the rollback that compensates transfer s1-a1" in doc["waiting"][0]["reason"]

    settled = polyloop("mark-resolved", "refund", "s1-r1", "--executed", "--reason", "the refund is in the bank",
                       "--dir", "runs", env=env(bank))
    assert settled.returncode == 0, settled.stderr
    done = polyloop("resume", "refund", "--dir", "runs", env=env(bank))
    assert done.returncode == 0, done.stderr
    assert action(inspect(polyloop, bank, "refund"))["state"] == "rolled_back"
    assert balances(bank) == {"alice": 1000, "bob": 0}


def test_reconcile_settles_an_unknown_transfer_with_no_human(polyloop: Runner, bank: Path) -> None:
    done = run(polyloop, bank, "lost", TRANSFER_CRASH="after_transfer")
    assert done.returncode == -signal.SIGKILL
    assert action(inspect(polyloop, bank, "lost"))["state"] == "unknown"
    done = polyloop("resume", "lost", "--dir", "runs", env=env(bank))
    assert done.returncode == 0, done.stderr
    assert balances(bank) == {"alice": 200, "bob": 800}
    assert query(bank, "SELECT count(*) FROM transfers") == [(1,)]
    doc = inspect(polyloop, bank, "lost")
    [res] = doc["resolutions"]
    assert (res["source"], res["by"], res["outcome"]) == ("reconcile", "reconcile", "executed")
    a = action(doc)
    assert a["reconciled"]["outcome"] == "executed" and a["verification"]["passed"]
    assert a["observation"] == "moved 800 from alice to bob"
    human = polyloop("inspect", "lost", "--dir", "runs", env=env(bank))
    assert "by the tool's reconcile" in human.stdout


def test_a_crash_inside_the_verification_verifies_again_on_resume(polyloop: Runner, bank: Path) -> None:
    done = run(polyloop, bank, "verify", TRANSFER_CRASH="in_verify")
    assert done.returncode == -signal.SIGKILL
    doc = inspect(polyloop, bank, "verify")
    assert action(doc)["verification"] is None and doc["next"].startswith("verify transfer")
    done = polyloop("resume", "verify", "--dir", "runs", env=env(bank))
    assert done.returncode == 0, done.stderr
    assert balances(bank) == {"alice": 200, "bob": 800}
    assert query(bank, "SELECT count(*) FROM transfers") == [(1,)]
    assert action(inspect(polyloop, bank, "verify"))["verification"]["passed"]


def test_a_crash_inside_reconcile_simply_reconciles_again(polyloop: Runner, bank: Path) -> None:
    assert run(polyloop, bank, "twice", TRANSFER_CRASH="after_transfer").returncode == -signal.SIGKILL
    done = polyloop("resume", "twice", "--dir", "runs", env=env(bank, TRANSFER_CRASH="in_reconcile"))
    assert done.returncode == -signal.SIGKILL
    assert inspect(polyloop, bank, "twice")["resolutions"] == []
    done = polyloop("resume", "twice", "--dir", "runs", env=env(bank))
    assert done.returncode == 0, done.stderr
    assert query(bank, "SELECT count(*) FROM transfers") == [(1,)]
    assert balances(bank) == {"alice": 200, "bob": 800}


def test_reconcile_that_finds_nothing_runs_the_transfer_again(polyloop: Runner, bank: Path, workdir: Path) -> None:
    # The process died after the intent and after a passed precondition, before the bank saw anything.
    done = run(polyloop, bank, "never-sent", TRANSFER_CRASH="after_transfer", TRANSFER_SKIM="0")
    assert done.returncode == -signal.SIGKILL
    query_commit(bank, "DELETE FROM transfers")
    query_commit(bank, "UPDATE accounts SET balance = CASE name WHEN 'alice' THEN 1000 ELSE 0 END")
    done = polyloop("resume", "never-sent", "--dir", "runs", env=env(bank))
    assert done.returncode == 0, done.stderr
    assert balances(bank) == {"alice": 200, "bob": 800}
    doc = inspect(polyloop, bank, "never-sent")
    assert [e["state"] for e in doc["executions"] if e["kind"] == "action"] == ["resolved", "done"]
    assert doc["resolutions"][0]["outcome"] == "not_executed"


async def test_the_compensation_is_rehearsed(load_example, bank: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from polyloop.testing import rehearse_rollback

    monkeypatch.setenv("BANK_DB", str(bank))
    example = load_example("transfer")

    def bug() -> None:  # the bank credits one less than it reports
        query_commit(bank, "UPDATE transfers SET credited = credited - 1")
        query_commit(bank, "UPDATE accounts SET balance = balance - 1 WHERE name = 'bob'")

    rehearsal = await rehearse_rollback(example.transfer, {"src": "alice", "dst": "bob", "amount": 800},
                                        break_effect=bug)
    assert rehearsal.rolled_back
    assert [a["event"] for a in rehearsal.alerts] == ["verification_failed"]
    assert rehearsal.alerts[0]["rollback"] == "compensate"
    assert len(rehearsal.rollbacks) == 1
    assert balances(bank) == {"alice": 1000, "bob": 0}
    assert query(bank, "SELECT count(*) FROM refunds") == [(1,)]


def query_commit(bank: Path, sql: str, *args: object) -> None:
    db = sqlite3.connect(bank)
    try:
        db.execute(sql, args)
        db.commit()
    finally:
        db.close()
