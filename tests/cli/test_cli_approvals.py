"""`polyloop approve`, `deny` and `answer` with real processes: decisions, refusals, and two deciders at once."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import HERE, clean_env, logs_digest, one_line_error

AGENTS = HERE / "approval_agents.py"


def started(cli, name: str, run_id: str, tmp_path: Path):
    done = cli("run", f"{AGENTS}:{name}", "--goal", "g", "--run-id", run_id,
               env={"APPROVAL_TEST_EFFECTS": str(tmp_path / "effects")})
    assert done.code == 3, done
    return done


def d(cli, *args: str):
    return cli(*args, "--dir", str(cli.runs))


def effects(tmp_path: Path) -> list[str]:
    where = tmp_path / "effects"
    return sorted(p.name for p in where.iterdir()) if where.exists() else []


def resume(cli, run_id: str, tmp_path: Path):
    return cli("resume", run_id, env={"APPROVAL_TEST_EFFECTS": str(tmp_path / "effects")})


def test_a_stop_for_approval_prints_the_commands_and_inspect_lists_it(cli, tmp_path):
    done = started(cli, "payer", "p", tmp_path)
    assert "polyloop approve p s1-a1 --reason TEXT" in done.stderr
    assert "polyloop deny p s1-a1 --reason TEXT" in done.stderr
    assert effects(tmp_path) == []
    doc = cli("inspect", "p", "--json").json()
    assert doc["status"] == "needs_operator"
    assert [(w["id"], w["kind"], w["tool"], w["args"]) for w in doc["waiting"]] == [
        ("s1-a1", "approval", "pay", {"amount": 500, "to": "bob"})]
    assert doc["requests"][0]["args_sha256"] == cli.records("p")[-1]["args_sha256"]
    ls = cli("ls", "--dir", str(cli.runs), "--json").json()
    assert ls[0]["waiting_kinds"] == ["approval"] and ls[0]["waiting"][0]["kind"] == "approval"


def test_approve_then_resume_runs_it_once(cli, tmp_path):
    started(cli, "payer", "p", tmp_path)
    sha = cli.records("p")[-1]["args_sha256"]
    done = d(cli, "approve", "p", "s1-a1", "--reason", "checked", "--by", "ann", "--expect-sha256", sha)
    assert done.code == 0, done
    assert "approved s1-a1 of run p" in done.stdout
    assert resume(cli, "p", tmp_path).code == 0
    assert effects(tmp_path) == ["s1-a1-bob-500"]
    decision = next(r for r in cli.records("p") if r["record"] == "decision")
    assert (decision["by"], decision["reason"], decision["args_sha256"]) == ("ann", "checked", sha)


def test_approve_with_edited_arguments_runs_those(cli, tmp_path):
    started(cli, "payer", "p", tmp_path)
    done = d(cli, "approve", "p", "s1-a1", "--reason", "cap", "--args", '{"amount": 100, "to": "bob"}')
    assert done.code == 0, done
    assert "with edited arguments" in done.stdout
    assert resume(cli, "p", tmp_path).code == 0
    assert effects(tmp_path) == ["s1-a1-bob-100"]


def test_deny_then_resume_runs_nothing_and_the_model_reads_why(cli, tmp_path):
    started(cli, "payer", "p", tmp_path)
    assert d(cli, "deny", "p", "s1-a1", "--reason", "too much", "--by", "ann").code == 0
    assert resume(cli, "p", tmp_path).code == 0
    assert effects(tmp_path) == []
    step = next(r for r in cli.records("p") if r["record"] == "step_completed")
    assert step["observation"] == "denied by ann: too much"
    text = cli("inspect", "p").stdout
    assert "denied by ann" in text


def test_a_question_is_answered_and_resume_hands_it_to_the_model(cli, tmp_path):
    done = started(cli, "asker", "q", tmp_path)
    assert "polyloop answer q s1-a1 TEXT" in done.stderr
    assert "\x1b" not in done.stderr  # the question is untrusted text: shown escaped
    assert cli("inspect", "q", "--json").json()["waiting"][0]["kind"] == "answer"
    assert d(cli, "answer", "q", "s1-a1", "blue").code == 0
    assert resume(cli, "q", tmp_path).code == 0
    step = next(r for r in cli.records("q") if r["record"] == "step_completed")
    assert step["observation"] == "blue"
    assert [r["record"] for r in cli.records("q")].count("approval_request") == 1


BAD = [
    pytest.param(["approve", "s1-a1"], "Missing option '--reason'", id="approve-without-reason"),
    pytest.param(["approve", "s9-a1", "--reason", "x"], "does not wait for it", id="unknown-id"),
    pytest.param(["approve", "s1-a1", "--reason", "x", "--expect-sha256", "00"], "hash to", id="hash-mismatch"),
    pytest.param(["approve", "s1-a1", "--reason", "x", "--args", "{"], "not valid JSON", id="args-not-json"),
    pytest.param(["approve", "s1-a1", "--reason", "x", "--args", "[1]"], "JSON object", id="args-not-object"),
    pytest.param(["answer", "s1-a1", "blue"], "waits for approval", id="answer-an-approval"),
    pytest.param(["deny", "s1-a1", "--reason", "x", "--by", " "], "--by", id="empty-by"),
]


@pytest.mark.parametrize(("args", "message"), BAD)
def test_bad_decisions_exit_2_and_change_nothing(cli, tmp_path, args, message):
    started(cli, "payer", "p", tmp_path)
    before = logs_digest(cli.runs)
    done = d(cli, args[0], "p", *args[1:])
    assert done.code == 2, done
    assert message in one_line_error(done)
    assert done.stdout == ""
    assert logs_digest(cli.runs) == before


def test_a_second_decision_and_an_unknown_run_are_refused(cli, tmp_path):
    started(cli, "payer", "p", tmp_path)
    assert d(cli, "deny", "p", "s1-a1", "--reason", "no").code == 0
    again = d(cli, "approve", "p", "s1-a1", "--reason", "yes")
    assert again.code == 2 and "already denied" in one_line_error(again)
    missing = d(cli, "approve", "nope", "s1-a1", "--reason", "yes")
    assert missing.code == 2 and "no run 'nope'" in one_line_error(missing)


@pytest.mark.parametrize("round_", range(3))
def test_two_shells_deciding_at_once_leave_exactly_one_decision(cli, tmp_path, round_):
    started(cli, "payer", "p", tmp_path)
    barrier = tmp_path / f"go-{round_}"
    contenders = []
    for verb in ("approve", "deny"):
        argv = [sys.executable, str(HERE.parent / "crash" / "barrier_cli.py"), verb, "p", "s1-a1",
                "--reason", verb, "--dir", str(cli.runs)]
        contenders.append(subprocess.Popen(argv, cwd=tmp_path, env=clean_env(POLYLOOP_CLI_BARRIER=str(barrier)),
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                           stdin=subprocess.DEVNULL))
    deadline = time.monotonic() + 30
    while len(list(tmp_path.glob(f"go-{round_}.*.ready"))) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    barrier.touch()
    outputs = [p.communicate(timeout=60) for p in contenders]
    codes = sorted(p.returncode for p in contenders)
    assert codes == [0, 2], outputs
    refused = next(err for p, (_, err) in zip(contenders, outputs) if p.returncode == 2)
    assert "Traceback" not in refused and ("already" in refused or "is active" in refused), refused
    decisions = [r for r in cli.records("p") if r["record"] == "decision"]
    assert len(decisions) == 1
    doc = cli("verify", str(cli.runs), "--strict", "--json")
    assert doc.code == 0, doc
    assert json.loads(doc.stdout)
