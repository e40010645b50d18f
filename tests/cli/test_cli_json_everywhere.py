"""`--json` on every command that acts, one document each with `schema`, one shape per field
(docs/reference/json.md); placeholders refused; an unknown rollback named as the rollback it is."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import HERE, Cli, Done, target

PAY = f"{HERE / 'approval_agents.py'}:payer"
ASK = f"{HERE / 'approval_agents.py'}:asker"
BANK = f"{HERE / 'json_agents.py'}:banker"
WAITING_KEYS = {"id", "kind", "tool", "args", "reason"}


def one_doc(done: Done) -> dict[str, Any] | list[Any]:
    """stdout is exactly one JSON document (nothing before or after it), carrying `schema`."""
    doc = json.loads(done.stdout)  # raises on a second document or on human lines
    for d in doc if isinstance(doc, list) else [doc]:
        assert d["schema"] == 1, done
    return doc


def digest(runs: Path) -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(runs.glob("*.jsonl")))).hexdigest()


def d(cli: Cli) -> list[str]:
    return ["--dir", str(cli.runs)]


class Shapes:
    """Every `waiting` entry and every `next` value seen in any document."""

    def __init__(self) -> None:
        self.waiting: list[tuple[str, Any]] = []
        self.next: list[tuple[str, Any]] = []

    def collect(self, where: str, doc: Any) -> None:
        if isinstance(doc, list):
            for entry in doc:
                self.collect(where, entry)
            return
        if not isinstance(doc, dict):
            return
        for key, value in doc.items():
            if key == "waiting":
                self.waiting.append((where, value))
            elif key == "next":
                self.next.append((where, value))
            elif key == "runs":
                self.collect(where + ".runs", value)


def test_every_acting_command_prints_one_document_and_fields_have_one_shape(
    cli: Cli, tmp_path: Path, crashed_mailer
) -> None:
    env = {"APPROVAL_TEST_EFFECTS": str(tmp_path / "effects")}
    shapes = Shapes()

    def doc_of(name: str, done: Done, code: int) -> Any:
        assert done.code == code, done
        doc = one_doc(done)
        shapes.collect(name, doc)
        return doc

    # run: stops for an approval (exit 3): the document is the run as it stands, with the error.
    ran = doc_of("run", cli("run", PAY, "--run-id", "p1", "--goal", "pay", "--json", env=env), 3)
    assert (ran["command"], ran["run_id"], ran["status"], ran["exit_code"]) == ("run", "p1", "needs_operator", 3)
    assert ran["error"]["exit_code"] == 3 and ran["waiting"][0]["kind"] == "approval"
    assert "waits for a person" in ran_stderr(cli, env)  # the human lines went to stderr
    approved = doc_of("approve", cli("approve", "p1", "s1-a1", "--reason", "checked", "--json", *d(cli)), 0)
    assert approved["settled"]["decision"] == "approved" and approved["settled"]["reason"] == "checked"
    assert approved["error"] is None and approved["waiting"] == []
    resumed = doc_of("resume", cli("resume", "p1", "--json", env=env), 0)
    assert (resumed["status"], resumed["result"], resumed["exit_code"]) == ("finished", "paid", 0)

    doc_of("run", cli("run", PAY, "--run-id", "p2", "--goal", "pay", "--json", env=env), 3)
    denied = doc_of("deny", cli("deny", "p2", "s1-a1", "--reason", "not bob", "--json", *d(cli)), 0)
    assert denied["settled"]["decision"] == "denied"

    doc_of("run", cli("run", ASK, "--run-id", "q1", "--goal", "ask", "--json"), 3)
    answered = doc_of("answer", cli("answer", "q1", "s1-a1", "blue", "--json", *d(cli)), 0)
    assert answered["settled"]["decision"] == "answered"

    crashed_mailer("m1")
    stopped = doc_of("resume", cli("resume", "m1", "--json"), 3)
    assert [w["id"] for w in stopped["waiting"]] == ["s1-a1"]
    doc_of("inspect", cli("inspect", "m1", "--json"), 0)
    doc_of("ls", cli("ls", "--json", *d(cli)), 0)
    settled = doc_of("mark-resolved", cli("mark-resolved", "m1", "s1-a1", "--executed", "--reason", "sent", "--json"), 0)
    assert settled["settled"] == {"id": "s1-a1", "decision": "executed", "by": settled["settled"]["by"], "reason": "sent"}
    doc_of("resume", cli("resume", "m1", "--json"), 0)
    # An error is one document too, with schema.
    assert doc_of("error", cli("resume", "nope", "--json"), 2)["error"]["type"] == "RunNotFoundError"
    doc_of("verify", cli("verify", str(cli.runs), "--json"), 0)

    goals = tmp_path / "goals.txt"
    goals.write_text("pay\n")
    doc_of("batch", cli("batch", PAY, str(goals), "--json", *d(cli), env=env), 3)

    waits = [(where, w) for where, ws in shapes.waiting for w in ws]
    assert {"run", "resume", "ls", "inspect", "batch.runs"} <= {where for where, _ in waits}
    for where, value in shapes.waiting:
        assert isinstance(value, list), where
    for where, w in waits:
        assert set(w) == WAITING_KEYS, (where, w)
        assert all(isinstance(w[k], str) for k in ("id", "kind", "tool", "reason")), (where, w)
    assert {"run", "resume", "inspect", "mark-resolved", "batch", "batch.runs"} <= {where for where, _ in shapes.next}
    for where, value in shapes.next:
        assert value is None or isinstance(value, str), (where, value)


def ran_stderr(cli: Cli, env: dict[str, str]) -> str:
    return cli("run", PAY, "--run-id", "p-err", "--goal", "pay", "--json", env=env).stderr


def test_ls_keeps_the_kinds_under_waiting_kinds(cli: Cli, crashed_mailer) -> None:
    crashed_mailer("m2")
    (entry,) = one_doc(cli("ls", "--json", *d(cli)))
    assert entry["waiting_kinds"] == ["unknown"]
    assert entry["waiting"] == one_doc(cli("inspect", "m2", "--json"))["waiting"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["mark-resolved", "m", "s1-a1", "--executed"], "Missing option '--reason'", id="no-reason"),
        pytest.param(["mark-resolved", "m", "s1-a1", "--executed", "--reason", "TEXT"], "placeholder 'TEXT'",
                     id="mark-resolved-TEXT"),
        pytest.param(["mark-resolved", "m", "s1-a1", "--executed", "--reason", "ok", "--by", "NAME"],
                     "placeholder 'NAME'", id="mark-resolved-NAME"),
        pytest.param(["mark-resolved", "m", "s1-a1", "--not-executed", "--reason", " RESULT_ID "],
                     "placeholder 'RESULT_ID'", id="any-metavar"),
        pytest.param(["resume", "m", "--accept-changes", "--reason", "TEXT"], "placeholder 'TEXT'", id="resume-TEXT"),
        pytest.param(["resume", "m", "--accept-crash-loop", "--reason", "ok", "--by", "NAME"], "placeholder 'NAME'",
                     id="resume-NAME"),
    ],
)
def test_placeholders_and_a_missing_reason_are_refused_with_2(cli: Cli, crashed_mailer, args, message) -> None:
    crashed_mailer("m")
    before = digest(cli.runs)
    done = cli(*args)
    assert done.code == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done
    assert "Traceback" not in done.stderr
    assert digest(cli.runs) == before  # nothing written


def test_placeholders_are_refused_by_approve_deny_and_answer(cli: Cli, tmp_path: Path) -> None:
    env = {"APPROVAL_TEST_EFFECTS": str(tmp_path / "effects")}
    assert cli("run", PAY, "--run-id", "p", "--goal", "pay", env=env).code == 3
    assert cli("run", ASK, "--run-id", "q", "--goal", "ask").code == 3
    before = digest(cli.runs)
    for args in (
        ["approve", "p", "s1-a1", "--reason", "TEXT"],
        ["deny", "p", "s1-a1", "--reason", "no", "--by", "NAME"],
        ["answer", "q", "s1-a1", "TEXT"],
    ):
        done = cli(*args, *d(cli))
        assert done.code == 2 and "placeholder" in done.stderr, done
    assert digest(cli.runs) == before
    # Not a placeholder: words that merely contain one, or another case, are recorded.
    assert cli("approve", "p", "s1-a1", "--reason", "TEXT checked", "--by", "name", *d(cli)).code == 0


def test_the_python_api_refuses_a_placeholder_too(tmp_path: Path, crashed_mailer, cli: Cli) -> None:
    import asyncio

    from polyloop import InvalidInputError, JsonlStore, mark_resolved

    crashed_mailer("m3")
    with pytest.raises(InvalidInputError, match="placeholder 'TEXT'"):
        asyncio.run(mark_resolved(JsonlStore(cli.runs), "m3", "s1-a1", executed=True, reason="TEXT"))


def test_an_unknown_rollback_is_named_as_the_rollback_it_is(cli: Cli, tmp_path: Path) -> None:
    died = cli("run", BANK, "--run-id", "b", "--goal", "send")
    assert died.code == -9, died  # killed inside the compensating refund
    said = "the rollback that compensates transfer s1-a1 (s1-r1, step 1) is in doubt"
    doc = one_doc(cli("inspect", "b", "--json"))
    assert [(w["id"], w["kind"]) for w in doc["waiting"]] == [("s1-r1", "unknown")]
    assert doc["waiting"][0]["reason"].startswith(said) and doc["reason"].startswith(said)
    assert said in doc["next"]
    assert said in cli("inspect", "b").stdout
    stopped = cli("resume", "b")
    assert stopped.code == 3 and said in stopped.stderr and "The rollback below is in doubt" in stopped.stderr
    assert "the outcome of transfer" not in stopped.stderr
    goals = tmp_path / "g.txt"
    goals.write_text("send\n")
    summary = cli("batch", BANK, str(goals), *d(cli))
    assert summary.code == 3, summary
    assert said in summary.stdout and "the rollback undid transfer" in summary.stdout
