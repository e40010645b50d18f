"""Every command PolyLoop prints works when pasted, from any directory (issue 27 §4).

A run kept in a directory that is not the default one (with a space in its
path) is driven through several stops: an unknown `never` action, an
approval, a changed checkpoint, a run id that exists, a batch summary.
Every `polyloop ...` command printed on stdout, stderr or in --json output
is collected and run with bash from another directory: none may fail to
find the run.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

from cli_helpers import HERE, Cli, clean_env, console_script

AGENTS = HERE / "agents.py"
APPROVALS = HERE / "approval_agents.py"
# A command in backticks, or on a line of its own (before a `#` comment).
_TICKED = re.compile(r"`(polyloop [^`]+)`")
_LINE = re.compile(r"^\s*(?:then: )?(polyloop \S.*?)(?:\s{2,}#.*)?$")


def commands_in(*texts: str) -> list[str]:
    found: list[str] = []
    for text in texts:
        for line in text.splitlines():
            found += _TICKED.findall(line)
            m = _LINE.match(line)
            if m and "`" not in line:
                found.append(m.group(1).rstrip())
        try:
            found += commands_in(*_strings(json.loads(text)))
        except ValueError:
            pass
    return found


def _strings(doc: object) -> list[str]:
    if isinstance(doc, str):
        return [doc]
    if isinstance(doc, dict):
        return [s for v in doc.values() for s in _strings(v)]
    if isinstance(doc, list):
        return [s for v in doc for s in _strings(v)]
    return []


def paste(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run `command` as a person would paste it into bash, with `polyloop` on the PATH."""
    line = command.replace("TEXT", "checked")
    words = shlex.split(line)
    assert words[0] == "polyloop", command
    bindir = str(Path(console_script()[0]).parent) if len(console_script()) == 1 else None
    path = f"{bindir}{os.pathsep}{os.environ['PATH']}" if bindir else os.environ["PATH"]
    return subprocess.run(
        ["bash", "-c", line], cwd=cwd, env=clean_env(PATH=path, **env),
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )


def test_every_printed_command_finds_the_run_when_pasted_elsewhere(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    runs = tmp_path / "other dir" / "runs"
    cli = Cli(cwd=work, runs=runs)
    effects = {"APPROVAL_TEST_EFFECTS": str(tmp_path / "effects")}
    (work / "doc.txt").write_text("v1")
    printed: list[str] = []

    def seen(done) -> None:
        printed.extend(commands_in(done.stdout, done.stderr))

    # An unknown `never` action, and a run id that exists.
    died = cli("run", f"{AGENTS}:mailer", "--run-id", "m1", "--goal", "g", env={"POLYLOOP_TEST_KILL": "1"})
    assert died.code == -9
    stopped = cli("resume", "m1")
    assert stopped.code == 3, stopped
    seen(stopped)
    exists = cli("run", f"{AGENTS}:mailer", "--run-id", "m1", "--goal", "g")
    assert exists.code == 2 and "already exists" in exists.stderr
    seen(exists)
    seen(cli("inspect", "m1"))
    seen(cli("inspect", "m1", "--json"))
    # An approval, then a changed checkpoint.
    waits = cli("run", f"{APPROVALS}:payer", "--run-id", "p1", "--goal", "g", "--input", "doc=doc.txt", env=effects)
    assert waits.code == 3, waits
    seen(waits)
    approved = cli("approve", "p1", "s1-a1", "--reason", "ok", "--dir", str(runs))
    assert approved.code == 0, approved
    (work / "doc.txt").write_text("v2")
    refused = cli("resume", "p1", env=effects)
    assert refused.code == 4, refused
    seen(refused)
    seen(cli("inspect", "p1", "--json"))
    # A batch summary that names what waits and how to run the batch again.
    (work / "goals.txt").write_text("pay bob\n")
    batch = cli("batch", f"{APPROVALS}:payer", "goals.txt", "--name", "b1", "--dir", str(runs), env=effects)
    assert batch.code == 3, batch
    seen(batch)

    kinds = {c.split()[1] for c in printed}
    assert {"mark-resolved", "resume", "approve", "deny", "batch"} <= kinds, printed
    assert all("--dir" in c for c in printed), [c for c in printed if "--dir" not in c]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for command in dict.fromkeys(printed):
        done = paste(command, elsewhere, {**effects})
        said = done.stdout + done.stderr
        assert "no run" not in said and "not found" not in said and "No such" not in said, (command, said)
        assert done.returncode in (0, 1, 2, 3, 4), (command, done.returncode, said)
        if done.returncode == 2:  # refused for what it asks (already settled), never for where
            assert "cannot " in said or "already" in said, (command, said)
