"""A log holds whatever a model or a tool produced: rendering shows it inert."""

from __future__ import annotations

import json
import re

import pytest
from cli_helpers import Cli, one_line_error, target
from polyloop_cli.terminal import safe_text

# Anything that could drive a terminal: C0/C1 controls and bidi/format characters.
LIVE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")
NASTY_GOAL = "goal \x1b[31m [red]x[/red] [/x] \u202e \x1b]0;title\x07 :smile:"


def _assert_inert(text: str) -> None:
    assert not LIVE.search(text), repr(LIVE.search(text))


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x1b[31m", "\\x1b[31m"),
        ("\u202eevil", "\\u202eevil"),
        ("a\u200bb", "a\\u200bb"),
        ("\x9b2J", "\\x9b2J"),
        ("bell\x07", "bell\\x07"),
        ("cr\rlf", "cr\\rlf"),
        ("keep\nnew\tlines", "keep\nnew\tlines"),
        ("[red]x[/red] [/x]", "[red]x[/red] [/x]"),
        ("\U000e0001tag", "\\U000e0001tag"),
        ("\ud800", "\\ud800"),
        ("line\u2028sep", "line\\u2028sep"),
        ("plain ünïcode ✓", "plain ünïcode ✓"),
    ],
)
def test_safe_text(raw, shown):
    assert safe_text(raw) == shown


def test_safe_text_on_one_line_escapes_newlines_too():
    assert safe_text("a\nb\tc", one_line=True) == "a\\nb\\tc"


def test_a_hostile_run_renders_inert_everywhere(cli: Cli):
    done = cli("run", target("nasty"), "--goal", NASTY_GOAL, "--run-id", "n")
    assert done.code == 0, done
    _assert_inert(done.stdout + done.stderr)
    assert "\\x1b[31mred" in done.stdout and "[red]x[/red] [/x]" in done.stdout and "\\u202eevil" in done.stdout

    shown = cli("inspect", "n")
    assert shown.code == 0, shown
    _assert_inert(shown.stdout + shown.stderr)
    assert "[red]x[/red]" in shown.stdout and ":smile:" in shown.stdout
    assert "\\x1b[31m" in shown.stdout and "\\u202e" in shown.stdout

    raw = cli("inspect", "n", "--json")
    _assert_inert(raw.stdout)
    assert raw.json()["goal"] == NASTY_GOAL  # JSON keeps the exact text, escaped


def test_a_hostile_unknown_action_renders_inert_with_its_commands(cli: Cli):
    died = cli("run", target("nasty_mailer"), "--goal", "g", "--run-id", "nm", env={"POLYLOOP_TEST_KILL": "1"})
    assert died.code == -9
    for done in (cli("inspect", "nm"), cli("resume", "nm")):
        _assert_inert(done.stdout + done.stderr)
        assert f"polyloop mark-resolved nm s1-a1 --executed --reason TEXT --dir {cli.runs}" in done.stdout + done.stderr
    observation = "done \x1b[2J [bold]x[/] \u202e"
    settled = cli("mark-resolved", "nm", "s1-a1", "--executed", "--observation", observation, "--reason", "[/x]\x1b")
    assert settled.code == 0, settled
    shown = cli("inspect", "nm")
    _assert_inert(shown.stdout)
    assert "[bold]x[/]" in shown.stdout and "\\x1b[2J" in shown.stdout


def test_hostile_text_in_errors_and_paths_is_inert(cli: Cli, tmp_path):
    done = cli("run", "\x1b[31m[red]evil.py:x", "--goal", "g")
    assert done.code == 2
    line = one_line_error(done)
    _assert_inert(line)
    assert "\\x1b[31m[red]evil.py" in line

    cli.runs.mkdir()
    (cli.runs / "\x1b[31m[red]x\u202e.jsonl").write_text("garbage\n{}\n")
    done = cli("verify", str(cli.runs))
    assert done.code == 1
    _assert_inert(done.stdout + done.stderr)
    assert "\\x1b[31m[red]x\\u202e.jsonl" in done.stdout
    doc = cli("verify", str(cli.runs), "--json")
    _assert_inert(doc.stdout)
    assert json.loads(doc.stdout)["files"][0]["path"].endswith("\x1b[31m[red]x\u202e.jsonl")


def test_a_goal_that_is_not_utf8_is_bad_input(cli: Cli):
    import os
    import subprocess

    from cli_helpers import clean_env, console_script

    argv = [os.fsencode(a) for a in [*console_script(), "run", target("finishing"), "--run-id", "u", "--dir", str(cli.runs), "--goal"]]
    proc = subprocess.run([*argv, b"bad \xff byte"], capture_output=True, env=clean_env(), cwd=cli.cwd)
    assert proc.returncode == 2, proc
    assert b"not valid UTF-8" in proc.stderr and b"Traceback" not in proc.stderr
    assert not cli.log("u").exists()
