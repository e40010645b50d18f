"""`polyloop inspect`: the rendering and the --json document."""

from __future__ import annotations

import re

from cli_helpers import digest, one_line_error, target, tree_digest

STATUSES = {"finished", "needs_operator", "resumable", "corrupt", "active"}
STATES = {"done", "unknown", "superseded", "resolved"}


def _check_shape(doc):
    assert isinstance(doc, dict)
    for key in ("run_id", "status", "reason", "executions", "problems"):
        assert key in doc, key
    assert doc["status"] in STATUSES
    assert isinstance(doc["reason"], str) and doc["reason"]
    assert isinstance(doc["problems"], list) and all(isinstance(p, str) for p in doc["problems"])
    for e in doc["executions"]:
        assert e["kind"] in ("model_call", "action")
        assert e["state"] in STATES
        assert isinstance(e["id"], str) and isinstance(e["step"], int) and isinstance(e["attempt"], int)
        if e["kind"] == "action":
            assert isinstance(e["tool"], str) and isinstance(e["args"], dict)
            assert e["replay"] in ("safe", "never")


def test_json_of_a_finished_run(cli):
    cli("run", target("finishing"), "--goal", "what to buy?", "--run-id", "f")
    done = cli("inspect", "f", "--json")
    assert done.code == 0 and done.stderr == ""
    doc = done.json()
    _check_shape(doc)
    assert doc["run_id"] == "f"
    assert doc["status"] == "finished" and doc["reason"] == "final_answer"
    assert doc["problems"] == []
    assert [(e["id"], e["kind"], e["step"], e["attempt"], e["state"]) for e in doc["executions"]] == [
        ("s1-m1", "model_call", 1, 1, "done"),
        ("s1-a1", "action", 1, 1, "done"),
        ("s2-m1", "model_call", 2, 1, "done"),
    ]
    action = doc["executions"][1]
    assert (action["tool"], action["args"], action["replay"]) == ("read_note", {"name": "shopping"}, "safe")
    assert doc["tokens"]["input"] == 250 and doc["tokens"]["output"] == 30


def test_json_of_a_run_that_needs_an_operator(cli, crashed_mailer):
    crashed_mailer("op")
    doc = cli("inspect", "op", "--json").json()
    _check_shape(doc)
    assert doc["status"] == "needs_operator"
    action = [e for e in doc["executions"] if e["kind"] == "action"][0]
    assert (action["id"], action["state"], action["replay"], action["tool"]) == ("s1-a1", "unknown", "never", "send_email")
    assert "mark-resolved" in doc["next"]


def test_a_corrupt_log_is_reported_not_refused(cli):
    cli("run", target("finishing"), "--goal", "g", "--run-id", "c")
    log = cli.log("c")
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join([lines[0], b"not json\n", *lines[1:]]))
    before = digest(log)
    done = cli("inspect", "c", "--json")
    assert done.code == 0
    doc = done.json()
    _check_shape(doc)
    assert doc["status"] == "corrupt"
    assert doc["problems"] and "line" in doc["problems"][0]
    human = cli("inspect", "c")
    assert human.code == 0
    assert "corrupt" in human.stdout and "problems" in human.stdout
    assert digest(log) == before


def test_a_torn_tail_is_shown_and_left_alone(cli):
    cli("run", target("finishing"), "--goal", "g", "--run-id", "t")
    log = cli.log("t")
    with log.open("ab") as f:
        f.write(b'{"record":"inte')
    before = tree_digest(cli.runs)
    doc = cli("inspect", "t", "--json").json()
    assert doc["status"] == "finished" and doc["torn_tail_line"] == 10
    assert "torn tail" in cli("inspect", "t").stdout
    assert tree_digest(cli.runs) == before


def test_human_rendering_names_every_part(cli):
    cli("run", target("finishing"), "--goal", "what to buy?", "--run-id", "h")
    out = cli("inspect", "h").stdout
    for part in ("h", "finished", "what to buy?", "read_note", "tokens", "re-spent", "final answer", "nothing: the run finished"):
        assert part in out, part
    assert re.search(r"^1\s+s1-m1\s+done\s+100\+20\s+→ read_note\(\{\"name\": \"shopping\"\}\)", out, re.M)
    assert re.search(r"^\s+s1-a1\s+done\s+safe\s+= note shopping: buy milk", out, re.M)
    assert re.search(r"^2\s+s2-m1\s+done\s+150\+10\s+final answer: You need milk\.", out, re.M)


def test_unknown_and_unsafe_ids_exit_2_in_text_and_json(cli):
    done = cli("inspect", "nope")
    assert done.code == 2 and "no run 'nope'" in one_line_error(done)
    done = cli("inspect", "../../etc/passwd", "--json")
    assert done.code == 2
    error = done.json()["error"]
    assert error["type"] == "InvalidRunIdError" and error["exit_code"] == 2 and "invalid run id" in error["message"]
    assert "invalid run id" in one_line_error(done)
