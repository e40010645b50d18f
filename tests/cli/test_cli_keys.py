"""Forged idempotency keys (rule 36), with real `polyloop` processes: `verify` names the rule,
`inspect` says corrupt, and `resume` refuses before any tool sees the key."""

from __future__ import annotations

import json

import pytest
from cli_helpers import HERE, effects, logs_digest, one_line_error, target

FORGED = "pl-" + "0" * 32
APPROVAL_AGENTS = HERE / "approval_agents.py"


def forge(cli, run_id: str, *, record: str, key: str, name: str | None = None) -> None:
    """Give the first `record` line of a log carrying a key the idempotency key `key`; with
    `name`, also copy the log to run `name` (its run id replaced, its keys left as they were)."""
    lines = cli.log(run_id).read_text().splitlines()
    out, done = [], False
    for line in lines:
        rec = json.loads(line)
        if not done and rec["record"] == record and rec.get("idempotency_key"):
            rec["idempotency_key"], done = key, True
        if name is not None and "run_id" in rec:
            rec["run_id"] = name
        out.append(json.dumps(rec, ensure_ascii=False, separators=(",", ":")))
    assert done, f"no {record} with a key in {run_id}"
    (cli.log(name or run_id)).write_text("\n".join(out) + "\n")


# (id, the key the action intent gets, copied to another run id)
FORGERIES = [
    ("malformed", "pl-key", False),
    ("uppercase", "pl-" + "A" * 32, False),
    ("invented", FORGED, False),
    ("copied-from-another-run", None, True),
]


@pytest.mark.parametrize("key, copied", [f[1:] for f in FORGERIES], ids=[f[0] for f in FORGERIES])
def test_verify_and_inspect_report_a_forged_key_as_corruption_of_rule_36(cli, key, copied):
    assert cli("run", target("finishing"), "--goal", "g", "--run-id", "good").code == 0
    original = next(r for r in cli.records("good") if r["record"] == "intent" and r["kind"] == "action")
    forge(cli, "good", record="intent", key=key or original["idempotency_key"], name="forged" if copied else None)
    run_id = "forged" if copied else "good"
    if copied:
        cli.log("good").unlink()
    before = logs_digest(cli.runs)

    text = cli("verify", str(cli.runs))
    assert text.code == 1, text
    assert "idempotency key" in text.stdout and "(rule 36)" in text.stdout, text.stdout
    done = cli("verify", str(cli.runs), "--json")
    assert done.code == 1 and done.stderr == ""
    [verdict] = done.json()["files"]
    assert verdict["status"] == "corrupt"
    assert verdict["problems"][0]["rule"] == 36, verdict["problems"]

    report = cli("inspect", run_id, "--json")
    assert report.code == 0, report
    assert report.json()["status"] == "corrupt"
    assert any("(rule 36)" in p for p in report.json()["problems"])
    assert logs_digest(cli.runs) == before  # nothing repaired it


def test_resume_refuses_a_forged_request_key_before_the_approved_tool_runs(cli, tmp_path):
    """The approved action carries its request's key: forged there, it would reach the tool."""
    env = {"APPROVAL_TEST_EFFECTS": str(tmp_path / "effects")}
    assert cli("run", f"{APPROVAL_AGENTS}:payer", "--goal", "g", "--run-id", "p", env=env).code == 3
    sha = cli.records("p")[-1]["args_sha256"]
    assert cli("approve", "p", "s1-a1", "--reason", "ok", "--expect-sha256", sha, "--dir", str(cli.runs)).code == 0
    forge(cli, "p", record="approval_request", key=FORGED)
    before = logs_digest(cli.runs)

    done = cli("resume", "p", env=env)
    assert done.code == 1, done
    assert "corrupt" in one_line_error(done) and "rule 36" in done.stderr
    assert not (tmp_path / "effects").exists(), "the tool ran with a forged key"
    assert logs_digest(cli.runs) == before
    assert cli("inspect", "p", "--json").json()["status"] == "corrupt"


def test_resume_and_mark_resolved_refuse_a_forged_action_key_and_never_repeat_the_effect(
    cli, tmp_path, crashed_mailer
):
    crashed_mailer("m")
    assert effects(tmp_path) == 1
    forge(cli, "m", record="intent", key=FORGED)
    before = logs_digest(cli.runs)

    settle = cli("mark-resolved", "m", "s1-a1", "--not-executed", "--reason", "checked")
    assert settle.code == 1, settle
    assert "rule 36" in one_line_error(settle)
    done = cli("resume", "m", env={"POLYLOOP_TEST_EFFECTS": str(tmp_path / "effects")})
    assert done.code == 1, done
    assert "rule 36" in one_line_error(done)
    assert effects(tmp_path) == 1
    assert logs_digest(cli.runs) == before
    assert cli("inspect", "m", "--json").json()["status"] == "corrupt"
