"""Guarded actions at the command line: the alert line, exit 3 on an alert, settling it."""

from __future__ import annotations

from pathlib import Path

from cli_helpers import Cli

TARGET = str(Path(__file__).resolve().parent / "guard_agents.py") + ":publisher"


def test_an_alert_stops_with_3_and_is_settled_with_mark_resolved(cli: Cli, tmp_path: Path) -> None:
    env = {"GUARD_TEST_DIR": str(tmp_path / "site")}
    done = cli("run", TARGET, "--run-id", "pub", "--goal", "publish", env=env)
    assert done.code == 3, done
    assert "polyloop: ALERT: publish (s1-a1): verification failed" in done.stderr
    assert "\x1b" not in done.stderr and "\\x1b" in done.stderr  # untrusted text is escaped
    assert "no rollback undid it" in done.stderr
    assert "polyloop mark-resolved pub s1-a1" in done.stderr and "--not-executed" in done.stderr

    doc = cli("inspect", "pub", "--json").json()
    assert doc["status"] == "needs_operator"
    assert [(w["id"], w["kind"]) for w in doc["waiting"]] == [("s1-a1", "alert")]
    human = cli("inspect", "pub")
    assert human.code == 0 and "alert" in human.stdout and "[verify FAILED:" in human.stdout
    assert "publish verify, rollback alert, irreversible" in human.stdout
    assert doc["tools"][0]["guards"]["rollback"] == "alert"

    again = cli("resume", "pub", env=env)
    assert again.code == 3 and "ALERT" in again.stderr  # still unsettled: said again
    assert cli("mark-resolved", "pub", "s1-a2", "--executed", "--reason", "checked").code == 2
    settled = cli("mark-resolved", "pub", "s1-a1", "--executed", "--observation", "live after a purge",
                  "--reason", "purged the CDN")
    assert settled.code == 0, settled
    done = cli("resume", "pub", env=env)
    assert done.code == 0, done
    assert cli("inspect", "pub", "--json").json()["executions"][1]["state"] == "resolved"
    assert len(list((tmp_path / "site").iterdir())) == 1  # published once
