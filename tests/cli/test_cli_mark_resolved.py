"""`polyloop mark-resolved`: refuses anything but an open unknown, and never writes when it refuses."""

from __future__ import annotations

import pytest
from cli_helpers import logs_digest, one_line_error, target, tree_digest

BAD = [
    pytest.param(["s1-a1"], "--executed or --not-executed", id="no-verdict"),
    pytest.param(["s1-a1", "--executed", "--not-executed"], "not both", id="both-verdicts"),
    pytest.param(["s1-a1", "--not-executed", "--observation", "x"], "only with --executed", id="observation-without-executed"),
    pytest.param(["s1-a1", "--executed", "--observation", "x", "--observation-file", "f"], "not both", id="two-observations"),
    pytest.param(["s1-a1", "--executed", "--observation-file", "missing.txt"], "cannot read", id="missing-observation-file"),
    pytest.param(["s1-m1", "--executed"], "model call", id="a-model-call"),
    pytest.param(["s7-a1", "--executed"], "no such execution", id="no-such-execution"),
    pytest.param(["s1-a1", "--executed", "--bogus"], "No such option", id="bad-flag"),
]


@pytest.mark.parametrize(("args", "message"), BAD)
def test_bad_requests_exit_2_and_change_nothing(cli, crashed_mailer, args, message):
    crashed_mailer("m")
    with cli.log("m").open("ab") as f:
        f.write(b'{"record":"st')  # a torn tail: taking the run lock would seal it
    before = logs_digest(cli.runs)
    done = cli("mark-resolved", "m", *args, "--reason", "checked")
    assert done.code == 2, done
    assert message in one_line_error(done)
    assert done.stdout == ""
    assert logs_digest(cli.runs) == before  # the torn tail too: only a write cuts it


def test_a_finished_run_has_nothing_to_resolve(cli):
    cli("run", target("finishing"), "--goal", "g", "--run-id", "f")
    before = tree_digest(cli.runs)
    done = cli("mark-resolved", "f", "s1-a1", "--executed", "--reason", "checked")
    assert done.code == 2
    assert "finished" in one_line_error(done)
    assert tree_digest(cli.runs) == before


def test_an_unknown_run_creates_nothing(cli, tmp_path):
    done = cli("mark-resolved", "ghost", "s1-a1", "--executed", "--reason", "checked")
    assert done.code == 2
    assert "no run 'ghost'" in one_line_error(done)
    assert not cli.runs.exists()
    assert cli("mark-resolved", "../ghost", "s1-a1", "--executed", "--reason", "checked").code == 2


def test_the_observation_can_come_from_a_file(cli, crashed_mailer, tmp_path):
    crashed_mailer("m")
    (tmp_path / "obs.txt").write_text("sent\nmessage-id: <1@x>\n")
    done = cli("mark-resolved", "m", "s1-a1", "--executed", "--reason", "checked", "--observation-file", "obs.txt")
    assert done.code == 0, done
    assert cli.records("m")[-1]["observation"] == "sent\nmessage-id: <1@x>\n"


def test_a_resolution_records_who_when_and_why(cli, crashed_mailer):
    import getpass
    import socket

    crashed_mailer("m")
    done = cli("mark-resolved", "m", "s1-a1", "--not-executed", "--reason", "not in the outbox")
    assert done.code == 0, done
    r = cli.records("m")[-1]
    assert r["record"] == "resolution" and r["outcome"] == "not_executed" and r["observation"] is None
    # Who, as every settling command records it: the OS user and host.
    assert r["by"] == f"{getpass.getuser()}@{socket.gethostname()}"
    assert r["reason"] == "not in the outbox" and r["at"]
    assert "resolved s1-a1" in done.stdout and "run send_email again" in done.stdout


def test_by_names_who_settled_it(cli, crashed_mailer):
    crashed_mailer("m")
    assert cli("mark-resolved", "m", "s1-a1", "--executed", "--by", " ").code == 2
    done = cli("mark-resolved", "m", "s1-a1", "--executed", "--by", "ops-oncall", "--reason", "in the outbox")
    assert done.code == 0, done
    assert cli.records("m")[-1]["by"] == "ops-oncall"
