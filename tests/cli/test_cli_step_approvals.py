"""A step of several tool calls where some wait for a person, with real `polyloop` processes.

Nothing of the step runs until every request of it is decided: the note (a
`never` tool that waits for nobody) leaves no file while the payment beside
it waits; after the decisions `resume` runs every released call once.
"""

from __future__ import annotations

from pathlib import Path

from cli_helpers import HERE

AGENTS = HERE / "approval_agents.py"


def env(tmp_path: Path) -> dict[str, str]:
    return {"APPROVAL_TEST_EFFECTS": str(tmp_path / "effects")}


def effects(tmp_path: Path) -> list[str]:
    where = tmp_path / "effects"
    return sorted(p.name for p in where.iterdir()) if where.exists() else []


def decide(cli, *args: str):
    done = cli(*args, "--dir", str(cli.runs))
    assert done.code == 0, done
    return done


def waiting(cli, run_id: str) -> list[str]:
    doc = cli("inspect", run_id, "--json").json()
    assert doc["status"] == "needs_operator", doc
    return [w["id"] for w in doc["waiting"]]


def test_a_note_beside_a_payment_that_waits_runs_only_after_the_approval(cli, tmp_path):
    done = cli("run", f"{AGENTS}:note_and_pay", "--goal", "g", "--run-id", "p", env=env(tmp_path))
    assert done.code == 3, done
    assert "polyloop approve p s1-c2-a1 --reason TEXT" in done.stderr
    assert effects(tmp_path) == []  # the note waits with its step
    assert waiting(cli, "p") == ["s1-c2-a1"]
    again = cli("resume", "p", env=env(tmp_path))
    assert again.code == 3 and effects(tmp_path) == [], again
    decide(cli, "approve", "p", "s1-c2-a1", "--reason", "checked", "--by", "ann")
    assert cli("resume", "p", env=env(tmp_path)).code == 0
    assert effects(tmp_path) == ["s1-c1-a1-note-hello", "s1-c2-a1-bob-500"]  # each once
    done = next(r for r in cli.records("p") if r["record"] == "step_completed")
    assert [c["observation"] for c in done["calls"]] == ["noted hello", "paid 500 to bob"]
    assert cli("verify", str(cli.runs), "--strict").code == 0


def test_a_denial_releases_the_note_and_the_model_reads_it(cli, tmp_path):
    assert cli("run", f"{AGENTS}:note_and_pay", "--goal", "g", "--run-id", "p", env=env(tmp_path)).code == 3
    assert effects(tmp_path) == []
    decide(cli, "deny", "p", "s1-c2-a1", "--reason", "too much", "--by", "ann")
    assert cli("resume", "p", env=env(tmp_path)).code == 0
    assert effects(tmp_path) == ["s1-c1-a1-note-hello"]
    done = next(r for r in cli.records("p") if r["record"] == "step_completed")
    assert [c["observation"] for c in done["calls"]] == ["noted hello", "denied by ann: too much"]


def test_the_first_of_two_decisions_releases_nothing(cli, tmp_path):
    assert cli("run", f"{AGENTS}:two_payments", "--goal", "g", "--run-id", "p", env=env(tmp_path)).code == 3
    assert waiting(cli, "p") == ["s1-c1-a1", "s1-c3-a1"]
    first = decide(cli, "approve", "p", "s1-c1-a1", "--reason", "ok", "--args", '{"amount": 450, "to": "bob"}')
    assert "polyloop approve p s1-c3-a1" in first.stdout  # what still waits, and how to decide it
    held = cli("resume", "p", env=env(tmp_path))
    assert held.code == 3, held
    assert "polyloop approve p s1-c3-a1" in held.stderr and "s1-c1-a1" not in held.stderr
    assert effects(tmp_path) == [] and waiting(cli, "p") == ["s1-c3-a1"]
    decide(cli, "approve", "p", "s1-c3-a1", "--reason", "ok")
    assert cli("resume", "p", env=env(tmp_path)).code == 0
    assert effects(tmp_path) == ["s1-c1-a1-bob-450", "s1-c2-a1-note-hello", "s1-c3-a1-cy-600"]
    assert cli("verify", str(cli.runs), "--strict").code == 0


def test_a_question_beside_a_note_holds_it_until_answered(cli, tmp_path):
    assert cli("run", f"{AGENTS}:ask_and_note", "--goal", "g", "--run-id", "q", env=env(tmp_path)).code == 3
    assert effects(tmp_path) == []
    assert cli("inspect", "q", "--json").json()["waiting"][0]["kind"] == "answer"
    decide(cli, "answer", "q", "s1-c1-a1", "blue")
    assert cli("resume", "q", env=env(tmp_path)).code == 0
    assert effects(tmp_path) == ["s1-c2-a1-note-hello"]
    done = next(r for r in cli.records("q") if r["record"] == "step_completed")
    assert [c["observation"] for c in done["calls"]] == ["blue", "noted hello"]
