"""run → crash → inspect → mark-resolved → resume, with real processes and a real SIGKILL."""

from __future__ import annotations

import hashlib

import re

from cli_helpers import digest, effects, one_line_error, target, tree_digest


def test_executed_resolution_reuses_the_observation_and_never_repeats_the_effect(cli, crashed_mailer, tmp_path):
    env = {"POLYLOOP_TEST_EFFECTS": str(tmp_path / "effects")}
    first = crashed_mailer("m")
    assert first.stdout.startswith("run m")  # the id was printed before the process died
    assert effects(tmp_path) == 1

    shown = cli("inspect", "m")
    assert shown.code == 0
    assert "needs_operator" in shown.stdout
    assert re.search(r"s1-a1\s+unknown\s+never\s+no result", shown.stdout)
    assert f"polyloop mark-resolved m s1-a1 --executed --reason TEXT --dir {cli.runs}" in shown.stdout
    assert f"polyloop mark-resolved m s1-a1 --not-executed --reason TEXT --dir {cli.runs}" in shown.stdout

    stopped = cli("resume", "m", env=env)
    assert stopped.code == 3, stopped
    assert f"polyloop mark-resolved m s1-a1 --executed --reason TEXT --dir {cli.runs}" in stopped.stderr
    assert effects(tmp_path) == 1

    settled = cli("mark-resolved", "m", "s1-a1", "--executed", "--observation", "sent to ops", "--reason", "in outbox")
    assert settled.code == 0, settled
    assert "reuse the operator's observation" in settled.stdout
    assert f"polyloop resume m --dir {cli.runs}" in settled.stdout
    resolution = cli.records("m")[-1]
    assert resolution["record"] == "resolution"
    assert resolution["outcome"] == "executed"
    assert resolution["observation"] == "sent to ops"
    assert resolution["reason"] == "in outbox"
    assert resolution["by"] and resolution["at"]

    again = cli("mark-resolved", "m", "s1-a1", "--not-executed", "--reason", "checked")
    assert again.code == 2
    assert "not unknown" in one_line_error(again)

    finished = cli("resume", "m", env=env)
    assert finished.code == 0, finished
    assert "Email sent." in finished.stdout
    assert effects(tmp_path) == 1  # resume did not send it again
    steps = [r for r in cli.records("m") if r["record"] == "step_completed"]
    assert steps[0]["observation"] == "sent to ops"


def test_not_executed_resolution_runs_the_action_again(cli, crashed_mailer, tmp_path):
    env = {"POLYLOOP_TEST_EFFECTS": str(tmp_path / "effects")}
    crashed_mailer("n")
    settled = cli("mark-resolved", "n", "s1-a1", "--not-executed", "--reason", "bounced")
    assert settled.code == 0, settled
    assert "run send_email again" in settled.stdout
    finished = cli("resume", "n", env=env)
    assert finished.code == 0, finished
    assert effects(tmp_path) == 2
    states = {e["id"]: e["state"] for e in cli("inspect", "n", "--json").json()["executions"]}
    assert states["s1-a1"] == "resolved" and states["s1-a2"] == "done"


def test_resume_of_a_finished_run_reports_it_without_running_it(cli):
    cli("run", target("finishing"), "--goal", "g", "--run-id", "fin")
    before = digest(cli.log("fin"))
    done = cli("resume", "fin")
    assert done.code == 0, done
    assert "already finished" in done.stdout
    assert "You need milk." in done.stdout
    assert digest(cli.log("fin")) == before


def test_resume_of_a_run_that_ended_in_an_error_reports_it_with_1(cli):
    cli("run", target("model_error"), "--goal", "g", "--run-id", "bad")
    done = cli("resume", "bad")
    assert done.code == 1
    assert "already finished with an error" in one_line_error(done)


def test_an_unknown_model_call_is_reissued_and_the_old_attempt_stays_visible(cli):
    died = cli("run", target("model_crash"), "--goal", "g", "--run-id", "mc", env={"POLYLOOP_TEST_KILL_MODEL": "1"})
    assert died.code == -9
    assert cli("inspect", "mc", "--json").json()["status"] == "resumable"
    done = cli("resume", "mc")
    assert done.code == 0, done
    assert "re-issue the unanswered model call of step 1 as attempt 2" in done.stderr
    doc = cli("inspect", "mc", "--json").json()
    calls = [(e["id"], e["state"]) for e in doc["executions"] if e["kind"] == "model_call"]
    assert calls[:2] == [("s1-m1", "superseded"), ("s1-m2", "done")]
    assert doc["tokens"]["reissued_calls"] == 1
    human = cli("inspect", "mc").stdout
    assert re.search(r"s1-m1\s+superseded", human) and "re-spent" in human


def test_resume_refuses_unknown_and_unsafe_ids_and_corrupt_logs(cli, tmp_path):
    assert cli("resume", "nope").code == 2
    assert cli("resume", "../x").code == 2
    cli.runs.mkdir()
    cli.log("bad").write_text('{"record":"intent"}\n')
    before = tree_digest(cli.runs)
    done = cli("resume", "bad")
    assert done.code == 1
    assert "corrupt" in one_line_error(done)
    after = tree_digest(cli.runs)
    assert after.pop(".bad.lock") == hashlib.sha256(b"").hexdigest()  # an empty lock file beside it
    assert after == before  # the log as it was


def test_resume_of_an_unknown_schema_major_is_refused_with_1(cli):
    cli("run", target("finishing"), "--goal", "g", "--run-id", "v9")
    log = cli.log("v9")
    log.write_text(log.read_text().replace('"schema_version":"1.4"', '"schema_version":"9.0"'))
    done = cli("resume", "v9")
    assert done.code == 1
    assert "schema version" in one_line_error(done)


def test_a_store_that_cannot_read_exits_1(cli):
    cli.log("dir").mkdir(parents=True)  # a directory where the log should be
    done = cli("resume", "dir")
    assert done.code == 1
    assert "is a directory" in one_line_error(done)
