"""People's decisions with real processes: a blank reason or name is refused by every settling command,
and every command that says what resume does next says what resume then does.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import HERE, Cli, logs_digest, one_line_error

AGENTS = HERE / "approval_agents.py"
# Empty, whitespace, a control character, format characters (zero-width space, a bidi override).
BLANKS = ["", "   ", "\t \n", "\x1b", "\u200b\u202e"]


def run(cli: Cli, *args: str, env: dict[str, str] | None = None):
    return cli(*args, "--dir", str(cli.runs), env=env, dir=False)


def started(cli: Cli, tmp_path: Path, agent: str, run_id: str = "r", **env: str) -> Path:
    """A run of `agent` with the input `data` (data.txt), stopped for a person; returns data.txt."""
    data = tmp_path / "data.txt"
    data.write_text("v1")
    env = {"APPROVAL_TEST_EFFECTS": str(tmp_path / "effects"), **env}
    done = run(cli, "run", f"{AGENTS}:{agent}", "--goal", "g", "--run-id", run_id, "--input", f"data={data}", env=env)
    assert done.code == (-9 if env.get("APPROVAL_TEST_KILL") else 3), done
    return data


def refused_blank(cli: Cli, args: list[str], blank: str, flag: str) -> None:
    before, log = logs_digest(cli.runs), cli.log("r").read_bytes()
    done = run(cli, *args)
    assert done.code == 2, (blank, done)
    line = one_line_error(done)
    assert flag in line and "blank" in line, line
    assert done.stdout == ""
    assert cli.log("r").read_bytes() == log and logs_digest(cli.runs) == before  # not a byte written


DECISIONS = [
    pytest.param("drafting_payer", ["approve", "r", "s2-a1", "--reason", "{}"], id="approve"),
    pytest.param("drafting_payer", ["deny", "r", "s2-a1", "--reason", "{}"], id="deny"),
    pytest.param("drafting_asker", ["answer", "r", "s2-a1", "blue", "--reason", "{}"], id="answer"),
    pytest.param("drafting_poster", ["mark-resolved", "r", "s2-a1", "--not-executed", "--reason", "{}"],
                 id="mark-resolved"),
]


@pytest.mark.parametrize(("agent", "args"), DECISIONS)
def test_a_blank_reason_or_name_is_refused_by_every_decision(cli, tmp_path, agent, args):
    started(cli, tmp_path, agent, **({"APPROVAL_TEST_KILL": "1"} if agent == "drafting_poster" else {}))
    for blank in BLANKS:
        refused_blank(cli, [a.replace("{}", blank) for a in args], blank, "--reason")
    named = [a.replace("{}", "checked") for a in args]
    for blank in BLANKS:  # `--by ""` was refused before: the same check now covers the rest
        refused_blank(cli, [*named, "--by", blank], blank, "--by")
    assert run(cli, *named).code == 0  # and a reason in words is recorded


RESUMES = [
    pytest.param(["--accept-changes", "--reason", "{}"], id="accept-changes"),
    pytest.param(["--accept-crash-loop", "--reason", "{}"], id="accept-crash-loop"),
    pytest.param(["--reason", "{}"], id="reason-alone"),
    pytest.param(["--accept-changes", "--reason", "v2 is right", "--by", "{}"], id="accept-changes-by"),
]


@pytest.mark.parametrize("args", RESUMES)
def test_a_blank_reason_or_name_is_refused_by_resume_before_anything_is_accepted(cli, tmp_path, args):
    data = started(cli, tmp_path, "drafting_payer")
    assert run(cli, "approve", "r", "s2-a1", "--reason", "ok").code == 0
    data.write_text("v2")  # an accepted change would now be written
    flag = "--by" if "--by" in args else "--reason"
    for blank in BLANKS:
        refused_blank(cli, ["resume", "r", *(a.replace("{}", blank) for a in args)], blank, flag)


# -- the next line -------------------------------------------------------------------------------------------

SETTLE = {
    "approve": ("drafting_payer", ["approve", "r", "s2-a1", "--reason", "checked"]),
    "deny": ("drafting_payer", ["deny", "r", "s2-a1", "--reason", "too much"]),
    "answer": ("drafting_asker", ["answer", "r", "s2-a1", "blue"]),
    "mark-resolved": ("drafting_poster", ["mark-resolved", "r", "s2-a1", "--not-executed", "--reason", "no post"]),
}


def change(what: str, data: Path, runs: Path) -> dict[str, str]:
    """Change what the run depends on; returns the environment the agent now runs in."""
    if what == "input":
        data.write_text("v2")
    elif what == "product":
        (runs / "r.artifacts" / "draft.txt").write_text("pay bob 5000")
    return {"APPROVAL_TEST_VERSION": "2" if what == "logic_version" else "1"}


def next_line(stdout: str) -> str:
    (line,) = [x for x in stdout.splitlines() if x.startswith("next ")]
    return line[len("next "):].strip()


@pytest.mark.parametrize("what", ["input", "logic_version", "product"])
@pytest.mark.parametrize("command", list(SETTLE))
def test_every_settling_command_prints_what_resume_then_does(cli, tmp_path, command, what):
    agent, args = SETTLE[command]
    data = started(cli, tmp_path, agent, **({"APPROVAL_TEST_KILL": "1"} if command == "mark-resolved" else {}))
    env = change(what, data, cli.runs)

    # Before the decision: an altered product refuses first (unless an action that may have written it is
    # unknown: then it is unsettled), else resume stops for the person and inspect says what follows.
    waiting = run(cli, "inspect", "r", "--json", env=env).json()["next"]
    before = cli.log("r").read_bytes()
    done = run(cli, "resume", "r", env=env)
    if waiting.startswith("refuse (exit code 4): "):
        assert what == "product" and command != "mark-resolved" and done.code == 4, (done, waiting)
    else:
        assert done.code == 3 and waiting.startswith("stop: "), (done, waiting)
        if what != "product":
            assert "; then resume refuses (exit code 4): " in waiting, waiting
    assert cli.log("r").read_bytes() == before

    settled = run(cli, *args, env=env)
    assert settled.code == 0, settled
    said = next_line(settled.stdout)
    doc = run(cli, "inspect", "r", "--json", env=env).json()
    assert said == doc["next"] == next_line(run(cli, "inspect", "r", env=env).stdout)
    assert said.startswith("refuse (exit code 4): run 'r' cannot resume"), said
    assert "polyloop resume r --accept-changes --reason TEXT" in said
    assert "polyloop resume r --dir" not in settled.stdout  # no resume to run: it refuses
    before = cli.log("r").read_bytes()
    done = run(cli, "resume", "r", env=env)
    assert done.code == 4, done
    assert cli.log("r").read_bytes() == before


def test_with_nothing_changed_the_settling_command_still_says_run_and_resume_goes_on(cli, tmp_path):
    started(cli, tmp_path, "drafting_payer")
    done = run(cli, "approve", "r", "s2-a1", "--reason", "checked")
    assert next_line(done.stdout) == "run pay (step 2) with the approved arguments"
    assert "polyloop resume r --dir" in done.stdout
    assert run(cli, "resume", "r", env={"APPROVAL_TEST_EFFECTS": str(tmp_path / "effects")}).code == 0
