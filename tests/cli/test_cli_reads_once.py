"""Each command reads a run's log once (issue 26 §3): counted through the real CLI code, in-process.

Every read of a JSONL log goes through `JsonlStore._load` (under the hold or
not); a call that finds no log (`RunNotFoundError`) opened nothing and is not
counted. The alert lines of `run` and `resume` come from the run itself, and a
settling command's "next" line from the log it read to settle.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from cli_helpers import HERE
from polyloop_cli.main import app
from typer.testing import CliRunner

from polyloop import JsonlStore

GUARDED = f"{HERE / 'guard_agents.py'}:publisher"
APPROVAL = f"{HERE / 'approval_agents.py'}:payer"
MAILER = f"{HERE / 'agents.py'}:mailer"


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Counter[str]:
    counted: Counter[str] = Counter()
    load = JsonlStore._load

    def counting(self: JsonlStore, run_id: str):  # type: ignore[no-untyped-def]
        parsed = load(self, run_id)  # no log: RunNotFoundError, nothing was opened
        counted[run_id] += 1
        return parsed

    monkeypatch.setattr(JsonlStore, "_load", counting)
    monkeypatch.setenv("GUARD_TEST_DIR", str(tmp_path / "site"))
    monkeypatch.setenv("APPROVAL_TEST_EFFECTS", str(tmp_path / "effects"))
    for name in ("POLYLOOP_DIR", "POLYLOOP_STORE"):
        monkeypatch.delenv(name, raising=False)
    return counted


def polyloop(*args: str, code: int) -> str:
    done = CliRunner().invoke(app, list(args))
    assert done.exit_code == code, (done.output, done.exception)
    return done.output + (done.stderr if done.stderr_bytes is not None else "")


def test_run_and_resume_read_the_log_once_and_still_say_the_alert(reads: Counter[str], tmp_path: Path) -> None:
    runs = str(tmp_path / "runs")
    said = polyloop("run", GUARDED, "--run-id", "pub", "--goal", "g", "--dir", runs, code=3)
    assert reads["pub"] == 0  # a new run: nothing to read back
    assert "ALERT: publish (s1-a1): verification failed" in said
    reads.clear()
    said = polyloop("resume", "pub", "--dir", runs, code=3)
    assert reads["pub"] == 1
    assert "ALERT: publish (s1-a1): verification failed" in said  # still unsettled: said again


def test_inspect_and_settling_commands_read_the_log_once(reads: Counter[str], tmp_path: Path) -> None:
    runs = str(tmp_path / "runs")
    polyloop("run", APPROVAL, "--run-id", "p", "--goal", "g", "--dir", runs, code=3)
    polyloop("run", GUARDED, "--run-id", "pub", "--goal", "g", "--dir", runs, code=3)
    for args in (
        ("inspect", "p", "--dir", runs),
        ("inspect", "p", "--json", "--dir", runs),
        ("approve", "p", "s1-a1", "--reason", "ok", "--dir", runs),
        ("mark-resolved", "pub", "s1-a1", "--executed", "--reason", "purged", "--dir", runs),
    ):
        reads.clear()
        said = polyloop(*args, code=0)
        assert sum(reads.values()) == 1, (args, dict(reads))
        if args[0] != "inspect":
            assert "polyloop resume" in said  # the next line, from the log read to settle


def test_resume_with_an_accepted_change_reads_the_log_once(reads: Counter[str], tmp_path: Path) -> None:
    runs = str(tmp_path / "runs")
    data = tmp_path / "data.txt"
    data.write_text("v1")
    polyloop("run", APPROVAL, "--run-id", "p", "--goal", "g", "--input", f"doc={data}", "--dir", runs, code=3)
    data.write_text("v2")
    reads.clear()
    polyloop("resume", "p", "--accept-changes", "--reason", "v2 it is", "--dir", runs, code=3)
    assert reads["p"] == 1
