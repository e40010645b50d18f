"""A product that changed while its run was stopped: one judgement in every command, one acceptance.

A product replaced by a directory, a FIFO or a symbolic link (also one to
the very bytes written), in a folder replaced by a link, deleted, or
altered: `ls`, `verify`, `inspect` (text and --json) and `resume` say the
same words, `resume` refuses with exit 4 and both ways forward, and
`resume --accept-changes --reason` records one acceptance and goes on to the
end — also when the run stopped inside a `safe` action, whose step checks
every product again once it completed. Every command runs as a real
process with a timeout, so a read that waits on the FIFO fails the test
instead of hanging it.
"""

from __future__ import annotations

import os

import pytest
from cli_helpers import Cli, Done, HERE, logs_digest, one_line_error

TARGET = f"{HERE / 'artifact_agents.py'}:pipeline"
LIMIT = 30  # seconds any one command may take: a read blocked on a FIFO fails, never hangs

# How each change is put in words (after "product 'extract.json' (RUN.artifacts/extract.json) ").
CHANGES = {
    "directory": "is missing: a directory is in its place, not the regular file written",
    "fifo": "is missing: a FIFO is in its place, not the regular file written",
    "symlink": "is missing: a symbolic link is in its place, not the regular file written",
    "symlink_same_bytes": "is missing: a symbolic link is in its place, not the regular file written",
    "linked_folder": "is missing: its folder is a symbolic link, not a directory",
    "deleted": "is missing",
    "altered": "was altered: recorded 33 bytes, sha256 113d5153a4dd…; now 35 bytes, sha256 86598232faed…",
}
# Where the run stopped: between steps (at its third model call), or inside
# the `safe` action `summarize` of step 2, which reads extract.json.
STOPS = {"between_steps": {"POLYLOOP_TEST_DIE_AT_CALL": "3"}, "in_safe_action": {"POLYLOOP_TEST_DIE_IN_SUMMARIZE": "1"}}


def change(cli: Cli, run_id: str, how: str) -> None:
    folder = cli.runs / f"{run_id}.artifacts"
    product = folder / "extract.json"
    elsewhere = cli.cwd / f"elsewhere-{run_id}"
    elsewhere.mkdir()
    if how == "linked_folder":
        folder.rename(elsewhere / "folder")
        folder.symlink_to(elsewhere / "folder")
        return
    original = product.read_bytes()
    product.unlink()
    if how == "directory":
        product.mkdir()
    elif how == "fifo":
        os.mkfifo(product)
    elif how == "symlink":
        (elsewhere / "other").write_bytes(b"other bytes")
        product.symlink_to(elsewhere / "other")
    elif how == "symlink_same_bytes":
        (elsewhere / "same").write_bytes(original)
        product.symlink_to(elsewhere / "same")
    elif how == "altered":
        product.write_bytes(original + b"\n\n")
    else:
        assert how == "deleted"


def stopped_and_changed(cli: Cli, run_id: str, how: str, stop: str) -> str:
    """Crash a run, change its product `how`; return the sentence every command must say."""
    done = cli("run", TARGET, "--goal", "g", "--run-id", run_id, env=STOPS[stop], timeout=LIMIT)
    assert done.code == -9, done
    change(cli, run_id, how)
    return f"product 'extract.json' ({run_id}.artifacts/extract.json) {CHANGES[how]}"


def unsettled(how: str, stop: str) -> bool:
    # Altered bytes while an action of the open step has no outcome may be that
    # action's own unrecorded write: resume replays the step, then checks again.
    return how == "altered" and stop == "in_safe_action"


def assert_refused(done: Done, run_id: str, sentence: str, *, when: str = "cannot resume") -> None:
    assert done.code == 4, done
    # (a resume that replays the interrupted step first says so on the line before)
    line = one_line_error(done) if when == "cannot resume" else done.stderr.splitlines()[-1]
    assert "Traceback" not in done.stderr
    assert f"run {run_id!r} {when}: {sentence}" in line
    # the command names the run's place, since the run is not in the default ./runs
    assert "new run id" in line and f"`polyloop resume {run_id} --accept-changes --reason TEXT --dir " in line


@pytest.mark.parametrize("stop", STOPS)
@pytest.mark.parametrize("how", CHANGES)
def test_every_command_gives_the_same_judgement_and_resume_refuses_with_exit_4(cli: Cli, how: str, stop: str):
    sentence = stopped_and_changed(cli, "j", how, stop)
    shown = "unsettled" if unsettled(how, stop) else sentence.split(" ")[4].removesuffix(":")

    listed = cli("ls", "--dir", str(cli.runs), "--json", timeout=LIMIT)
    assert listed.code == 0, listed
    verified = cli("verify", str(cli.runs), "--json", timeout=LIMIT)
    report = cli("inspect", "j", "--json", timeout=LIMIT)
    assert report.code == 0, report
    doc = report.json()
    text = cli("inspect", "j", timeout=LIMIT)
    assert text.code == 0, text
    assert {a["name"]: a["state"] for a in doc["artifacts"]}["extract.json"] == shown

    if unsettled(how, stop):  # not refused before the replay; nothing to report yet
        assert verified.code == 0 and verified.json()["summary"]["bad_product"] == 0
        assert sentence not in listed.stdout and sentence not in doc["reason"]
        done = cli("resume", "j", timeout=LIMIT)
        assert_refused(done, "j", sentence, when="stops after step 2")
        return

    assert listed.json()[0]["reason"] == f"the checkpoint is no longer valid: {sentence}"
    assert verified.code == 1, verified
    problems = verified.json()["files"][0]["problems"]
    assert verified.json()["files"][0]["status"] == "bad_product" and problems[0]["message"] == sentence
    assert doc["status"] == "resumable" and doc["reason"] == f"the checkpoint is no longer valid: {sentence}"
    assert doc["next"].startswith(f"refuse (exit code 4): run 'j' cannot resume: {sentence}")
    assert sentence in text.stdout and "refuse (exit code 4)" in text.stdout

    before = logs_digest(cli.runs) if how != "fifo" else None  # (a FIFO is never opened, not even here)
    done = cli("resume", "j", timeout=LIMIT)
    assert_refused(done, "j", sentence)
    assert doc["next"].removeprefix("refuse (exit code 4): ") in done.stderr
    if before is not None:
        assert logs_digest(cli.runs) == before  # nothing written, nothing ran


@pytest.mark.parametrize("stop", STOPS)
@pytest.mark.parametrize("how", CHANGES)
def test_one_acceptance_covers_the_change_and_the_run_goes_on_to_the_end(cli: Cli, how: str, stop: str):
    stopped_and_changed(cli, "a", how, stop)
    done = cli("resume", "a", "--accept-changes", "--reason", "the product was replaced on purpose", timeout=LIMIT)
    assert done.code == 0, done
    assert "Traceback" not in done.stderr
    records = cli.records("a")
    acceptances = [r for r in records if r["record"] == "checkpoint_accepted"]
    assert len(acceptances) == 1
    accepted = {d["name"]: d for d in acceptances[0]["differences"]}
    # (a linked folder takes summary.txt with it, when step 2 had written it)
    both = how == "linked_folder" and stop == "between_steps"
    assert sorted(accepted) == (["extract.json", "summary.txt"] if both else ["extract.json"])
    assert {d["what"] for d in accepted.values()} == {"product"}
    assert (accepted["extract.json"]["now"] is None) == (how != "altered")
    assert acceptances[0]["reason"] == "the product was replaced on purpose"
    assert records[-1]["record"] == "run_finished" and records[-1]["reason"] == "final_answer"

    # Accepted on the record: no command calls it a change any more.
    doc = cli("inspect", "a", "--json", timeout=LIMIT).json()
    assert doc["status"] == "finished"
    verified = cli("verify", str(cli.runs), "--json", timeout=LIMIT)
    assert verified.code == 0 and verified.json()["summary"]["bad_product"] == 0, verified


def test_ls_calls_intact_products_intact(cli: Cli):
    done = cli("run", TARGET, "--goal", "g", "--run-id", "k", env=STOPS["between_steps"], timeout=LIMIT)
    assert done.code == -9, done
    listed = cli("ls", "--dir", str(cli.runs), "--json", timeout=LIMIT).json()
    assert listed[0]["status"] == "resumable"
    assert listed[0]["reason"] == cli("inspect", "k", "--json", timeout=LIMIT).json()["reason"]
    assert "no longer valid" not in listed[0]["reason"]
