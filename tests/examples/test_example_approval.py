"""examples/approval.py: one approval through the real `polyloop` CLI (approve, edited approval, deny)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from example_helpers import clean_env, console_script
from support import forking


def polyloop(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return forking.run([*console_script(), *args], cwd=workdir, env=clean_env(), capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)


def refunds(workdir: Path) -> list[str]:
    ledger = workdir / "refunds.txt"
    return ledger.read_text().splitlines() if ledger.exists() else []


def test_the_refund_waits_then_runs_once_with_the_approved_arguments(workdir: Path) -> None:
    run = ["run", "examples/approval.py:agent", "--goal", "refund order 1042", "--run-id"]
    assert polyloop(workdir, *run, "a").returncode == 3
    assert refunds(workdir) == []
    assert polyloop(workdir, "approve", "a", "s1-a1", "--reason", "ok", "--by", "ann").returncode == 0
    assert polyloop(workdir, "resume", "a").returncode == 0
    assert [line.split(" ", 1)[1] for line in refunds(workdir)] == ["order 1042 refunded 250"]

    assert polyloop(workdir, *run, "b").returncode == 3
    edited = polyloop(workdir, "approve", "b", "s1-a1", "--reason", "part", "--args", '{"order": "1042", "amount": 9}')
    assert edited.returncode == 0, edited.stderr
    assert polyloop(workdir, "resume", "b").returncode == 0
    assert refunds(workdir)[-1].endswith("order 1042 refunded 9")

    assert polyloop(workdir, *run, "c").returncode == 3
    assert polyloop(workdir, "deny", "c", "s1-a1", "--reason", "no").returncode == 0
    assert polyloop(workdir, "resume", "c").returncode == 0
    assert len(refunds(workdir)) == 2
