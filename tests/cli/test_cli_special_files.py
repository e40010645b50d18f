"""A path that is not a regular file (a FIFO, a socket, a device) never makes a command wait.

A plain open(2) of a FIFO waits for a writer forever. Every path a person
gives (an input, a goals file, an observation file, an agent target file)
and every path a run recorded (its inputs) is refused with one line naming
the path and what it is: exit 2 for a path on the command line, the
checkpoint's "changed input" (exit 4 from `resume`) for a recorded input.
Every command runs the real console script under a timeout, so a regression
fails with `TimeoutExpired` instead of hanging the suite.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cli_helpers import Cli, clean_env, console_script, logs_digest, one_line_error, target

TIMEOUT = 20  # seconds; every command here takes well under one
KINDS = {"fifo": "a FIFO", "socket": "a socket", "device": "a character device"}


@pytest.fixture
def special(tmp_path: Path) -> Iterator[Callable[[str, Path], Path]]:
    """Make `path` a FIFO, a bound unix socket, or a link to /dev/null (a device)."""
    sockets: list[socket.socket] = []

    def make(kind: str, path: Path) -> Path:
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "socket":
            # A unix socket's path is limited to ~100 bytes: bind it in a short
            # directory, then move the socket file into place.
            short = Path(tempfile.mkdtemp(prefix="pl", dir="/tmp")) / "s"
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.bind(str(short))
            sockets.append(sock)
            os.rename(short, path)
            short.parent.rmdir()
        else:
            path.symlink_to(os.devnull)
        return path

    yield make
    for sock in sockets:
        sock.close()


def _run(cli: Cli, run_id: str, *extra: str, agent: str = "finishing"):
    return cli("run", target(agent), "--goal", "g", "--run-id", run_id, *extra, timeout=TIMEOUT)


@pytest.mark.parametrize("kind", KINDS)
def test_run_refuses_an_input_that_is_not_a_regular_file(cli, tmp_path, special, kind):
    path = special(kind, tmp_path / "data")
    done = _run(cli, "r", "--input", f"x={path}")
    assert done.code == 2, done
    line = one_line_error(done)
    assert f"input 'x': {os.path.realpath(path)} is {KINDS[kind]}, not a regular file" in line
    assert not cli.log("r").exists()  # refused before the first byte


@pytest.mark.parametrize("kind", KINDS)
def test_a_recorded_input_that_became_a_fifo_is_a_changed_input(cli, tmp_path, special, kind):
    data = tmp_path / "data"
    data.write_text("v1")
    assert _run(cli, "r", "--input", f"x={data}", agent="model_down").code == 1  # stopped, resumable
    data.unlink()
    special(kind, data)
    before = logs_digest(cli.runs)

    shown = cli("inspect", "r", timeout=TIMEOUT)
    assert shown.code == 0, shown
    assert "refuse (exit code 4)" in shown.stdout and f"input 'x' ({data})" in shown.stdout
    doc = cli("inspect", "r", "--json", timeout=TIMEOUT).json()
    assert doc["validity"]["valid"] is False
    assert [(d["name"], d["now"]) for d in doc["validity"]["differences"]] == [("x", None)]

    done = cli("resume", "r", timeout=TIMEOUT)
    assert done.code == 4, done
    assert "checkpoint is no longer valid" in one_line_error(done)
    assert logs_digest(cli.runs) == before  # nothing was written


def test_resume_refuses_an_input_given_as_a_fifo(cli, tmp_path, special):
    data = tmp_path / "data"
    data.write_text("v1")
    assert _run(cli, "r", "--input", f"x={data}", agent="model_down").code == 1
    before = logs_digest(cli.runs)
    done = cli("resume", "r", "--input", f"x={special('fifo', tmp_path / 'pipe')}", timeout=TIMEOUT)
    assert done.code == 2, done
    assert "is a FIFO, not a regular file" in one_line_error(done)
    assert logs_digest(cli.runs) == before


@pytest.mark.parametrize("kind", KINDS)
def test_batch_refuses_a_goals_file_that_is_not_a_regular_file(cli, tmp_path, special, kind):
    goals = special(kind, tmp_path / "goals.txt")
    argv = ["batch", target("finishing"), str(goals), "--dir", str(cli.runs)]
    done = cli(*argv, timeout=TIMEOUT)
    assert done.code == 2, done
    assert f"the goals file {goals} is {KINDS[kind]}, not a regular file" in one_line_error(done)
    doc = cli(*argv, "--json", timeout=TIMEOUT).json()
    assert doc["error"]["exit_code"] == 2 and "not a regular file" in doc["error"]["message"]
    assert not cli.runs.exists()


@pytest.mark.parametrize("kind", KINDS)
def test_an_agent_target_file_that_is_not_a_regular_file_is_a_bad_target(cli, tmp_path, special, kind):
    special(kind, tmp_path / "agent.py")
    done = cli("run", "agent.py:agent", "--goal", "g", "--run-id", "r", timeout=TIMEOUT)
    assert done.code == 2, done
    assert f"agent.py is {KINDS[kind]}, not a regular file" in one_line_error(done)
    assert not cli.runs.exists()


@pytest.mark.parametrize("kind", KINDS)
def test_mark_resolved_refuses_an_observation_file_that_is_not_a_regular_file(
    cli, tmp_path, special, crashed_mailer, kind
):
    crashed_mailer("m")
    before = logs_digest(cli.runs)
    path = special(kind, tmp_path / "obs.txt")
    done = cli("mark-resolved", "m", "s1-a1", "--executed", "--reason", "checked", "--observation-file", str(path), timeout=TIMEOUT)
    assert done.code == 2, done
    assert f"cannot read the observation file {path}: it is {KINDS[kind]}" in one_line_error(done)
    assert logs_digest(cli.runs) == before


def test_an_observation_from_a_pipe_on_stdin_still_works(cli, crashed_mailer):
    crashed_mailer("m")
    argv = [*console_script(), "mark-resolved", "m", "s1-a1", "--executed", "--reason", "checked", "--observation-file", "-",
            "--dir", str(cli.runs)]
    done = subprocess.run(argv, cwd=cli.cwd, env=clean_env(), input="sent\n", capture_output=True, text=True,
                          timeout=TIMEOUT)
    assert done.returncode == 0, done
    assert cli.records("m")[-1]["observation"] == "sent\n"


@pytest.mark.parametrize("kind", ["fifo", "socket"])
def test_a_log_that_is_not_a_regular_file_is_corrupt_for_every_command(cli, special, kind):
    cli.runs.mkdir()
    special(kind, cli.log("g"))
    shown = cli("inspect", "g", "--json", timeout=TIMEOUT)
    assert shown.code == 0 and shown.json()["status"] == "corrupt", shown
    assert f"is {KINDS[kind]}, not a regular file" in shown.json()["reason"]
    for argv in (["resume", "g"], ["mark-resolved", "g", "s1-a1", "--not-executed", "--reason", "checked"],
                 ["approve", "g", "s1-a1", "--reason", "r", "--dir", str(cli.runs)]):
        done = cli(*argv, timeout=TIMEOUT)
        assert done.code == 1, (argv, done)
        assert f"is {KINDS[kind]}, not a regular file" in one_line_error(done)
    verified = cli("verify", str(cli.runs), "--json", timeout=TIMEOUT)
    assert verified.code == 1, verified
    assert json.dumps(verified.json()).count("not a regular file") == 1


def test_a_run_directory_replaced_by_a_fifo_is_named_in_the_error(cli, tmp_path, special):
    special("fifo", cli.runs)
    for argv in (["inspect", "r"], ["resume", "r"], ["mark-resolved", "r", "s1-a1", "--not-executed", "--reason", "checked"]):
        done = cli(*argv, timeout=TIMEOUT)
        assert done.code == 1, (argv, done)
        assert f"{cli.runs} is a FIFO, not a directory" in one_line_error(done)


def test_a_batch_manifest_replaced_by_a_fifo_is_refused(cli, tmp_path, special):
    (tmp_path / "goals.txt").write_text("one\n")
    cli.runs.mkdir()
    special("fifo", cli.runs / ".batch-goals.json")
    done = cli("batch", target("finishing"), "goals.txt", "--dir", str(cli.runs), timeout=TIMEOUT)
    assert done.code == 2, done
    assert "is a FIFO, not a regular file" in one_line_error(done)
    assert not cli.log("goals-00001").exists()
