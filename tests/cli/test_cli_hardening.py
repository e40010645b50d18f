"""Hardening: a hostile or unlucky user must not make a `never` action run twice, hang, or leak.

Each test reproduces one class of defect found when the project was tried as
such a user would, with real processes where signals or concurrency matter.
"""

from __future__ import annotations

import ast
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import HERE, Cli, clean_env, console_script, one_line_error, tree_digest

HARD = HERE / "hardening_agents.py"


def hard(name: str) -> str:
    return f"{HARD}:{name}"


def _start(cli: Cli, run_id: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*console_script(), "run", hard("charger"), "--goal", "g", "--run-id", run_id, "--dir", str(cli.runs)],
        cwd=cli.cwd,
        env=clean_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )


def _wait_for(path: Path, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 30
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the tool never started"
        time.sleep(0.02)


def test_ctrl_c_during_a_sync_never_tool_holds_the_run_until_the_tool_ends(cli, tmp_path):
    charges, started = tmp_path / "charges", tmp_path / "started"
    release = tmp_path / "release"
    env = {"POLYLOOP_TEST_CHARGES": str(charges), "POLYLOOP_TEST_STARTED": str(started),
           "POLYLOOP_TEST_SECONDS": "60", "POLYLOOP_TEST_RELEASE": str(release)}
    proc = _start(cli, "pay", env)
    _wait_for(started, proc)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    # The tool's thread is still charging: the run is held, nobody can settle or resume it.
    assert proc.poll() is None
    assert cli("inspect", "pay", "--json").json()["status"] == "active"
    assert cli("mark-resolved", "pay", "s1-a1", "--not-executed", "--reason", "checked").code == 2
    assert cli("resume", "pay").code == 2
    assert proc.poll() is None and not charges.exists()  # the tool was still running all along
    release.write_text("")  # let the tool end (instead of waiting out a fixed sleep)
    stdout, stderr = proc.communicate(timeout=90)
    assert proc.returncode == 130, (stdout, stderr)
    # The charge that did happen is recorded, not left unknown: resume goes on without an operator.
    doc = cli("inspect", "pay", "--json").json()
    assert doc["status"] == "resumable", doc
    assert [e["state"] for e in doc["executions"] if e["kind"] == "action"] == ["done"]
    done = cli("resume", "pay", env={"POLYLOOP_TEST_CHARGES": str(charges)})
    assert done.code == 0, done
    assert charges.read_text().splitlines() == ["charged 5"]


def test_a_tool_calling_sys_exit_is_a_tool_failure_not_our_exit_code(cli):
    done = cli("run", hard("exiting"), "--goal", "g", "--run-id", "q")
    assert done.code == 0, done
    steps = [r for r in cli.records("q") if r["record"] == "step_completed"]
    assert steps[0]["is_error"] and "SystemExit" in steps[0]["observation"]


def test_a_target_calling_sys_exit_at_import_is_a_bad_target(cli):
    done = cli("run", f"{HERE / 'exits_at_import.py'}:agent", "--goal", "g", "--run-id", "x")
    assert done.code == 2, done
    assert "sys.exit(7)" in one_line_error(done)
    assert not cli.log("x").exists()


def test_an_async_factory_is_refused_clearly_without_a_warning(cli):
    done = cli("run", hard("async_factory"), "--goal", "g", "--run-id", "x")
    assert done.code == 2, done
    assert "async function" in one_line_error(done)
    assert "RuntimeWarning" not in done.stderr


def test_text_that_is_not_valid_unicode_is_data_not_a_store_failure(cli):
    done = cli("run", hard("lister"), "--goal", "g", "--run-id", "ls")
    assert done.code == 0, done
    observation = [r for r in cli.records("ls") if r["record"] == "step_completed"][0]["observation"]
    assert json.loads(observation) == ["ok.txt", "bad-\\udcff.txt"]
    assert cli("verify", str(cli.runs)).code == 0


@pytest.mark.parametrize("flag", ["99999999999999999999", "1000000001", "0"])
def test_a_bad_budget_writes_nothing(cli, flag):
    done = cli("run", hard("charger"), "--goal", "g", "--run-id", "b", "--max-steps", flag)
    assert done.code == 2, done
    assert done.stdout == ""
    assert tree_digest(cli.runs) == {}


def test_a_run_id_starting_with_a_dash_is_refused_for_new_runs(cli):
    done = cli("run", hard("charger"), "--goal", "g", "--run-id=-dash")
    assert done.code == 2, done
    assert "'-'" in one_line_error(done)
    assert tree_digest(cli.runs) == {}


def test_ctrl_c_while_inspecting_a_finished_run_does_not_call_it_resumable(cli, tmp_path):
    cli("run", hard("lister"), "--goal", "g", "--run-id", "done")
    proc = subprocess.Popen(
        [*console_script(), "inspect", "done", "--dir", str(cli.runs)],
        cwd=cli.cwd, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    time.sleep(0.3)  # past the interpreter's own start-up (see the next test)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=30)
    # 130 when the signal lands while it works; 0 when it had finished; a
    # signal that lands as the interpreter tears down ends it as the OS does.
    assert proc.returncode in (0, 130, -signal.SIGINT), (proc.returncode, stdout, stderr)
    assert "Traceback" not in stderr and "resumable" not in stderr


def test_the_entry_point_runs_no_python_module_before_it_handles_ctrl_c():
    # A module written in Python runs code as it is imported, and a Ctrl-C in
    # that code is a traceback from our file (it was `signal`'s enums). The
    # entry point imports built-in modules only (whatever .pth files a Python
    # happens to run at start-up), and loads nothing but its package and itself.
    tree = ast.parse((HERE.parents[1] / "cli" / "entry.py").read_text())
    imported = [alias.name for node in tree.body if isinstance(node, ast.Import) for alias in node.names]
    imported += [node.module for node in tree.body if isinstance(node, ast.ImportFrom)]
    assert [name for name in imported if name not in sys.builtin_module_names] == []
    probe = (
        "import sys; before = set(sys.modules); import polyloop_cli.entry; "
        "print(*sorted(set(sys.modules) - before))"
    )
    out = subprocess.run([sys.executable, "-c", probe], env=clean_env(), capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["polyloop_cli", "polyloop_cli.entry"], out.stdout


def test_ctrl_c_at_start_up_exits_130_without_a_traceback(cli):
    # Our code handles Ctrl-C from its first line on (cli/entry.py imports
    # nothing but the built-in sys and _signal before it is ready). What comes before it - the
    # interpreter's own start-up and the console script's two imports - is
    # outside it, and so is a signal that lands as the interpreter tears
    # down after the work (-2, output complete). So: a traceback may only
    # come from that window, never from a frame of ours.
    for delay in (0.1, 0.2, 0.3, 0.45):
        proc = subprocess.Popen(
            [*console_script(), "verify", str(cli.cwd)],
            cwd=cli.cwd, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
        if "Traceback" in stderr:
            assert "polyloop_cli" not in stderr.split("Traceback", 1)[1].split("from polyloop_cli.entry", 1)[-1]
            assert "/cli/" not in stderr and "/polyloop/" not in stderr, stderr
            continue
        assert proc.returncode in (0, 130, -signal.SIGINT), (delay, proc.returncode, stderr)
        if proc.returncode == 130:
            assert "interrupted" in stderr and len(stderr.splitlines()) == 1, stderr


def test_printed_commands_are_quoted_for_a_shell(cli, tmp_path):
    # A result id carrying shell text can only come from a hand-made log: it is refused as
    # corrupt (rule 13), and nothing prints it as a command.
    cli.runs.mkdir()
    log = cli.log("evil")
    lines = [
        {"record": "run_started", "run_id": "evil", "goal": "g", "target": None, "config": {"max_steps": 3},
         "schema_version": "1.0", "at": "2026-12-01T00:00:00.000000Z"},
        {"record": "intent", "kind": "model_call", "step": 1, "attempt": 1, "result_id": "s1-m1",
         "tool": None, "args": None, "replay": None, "idempotency_key": None, "at": "2026-12-01T00:00:00.000000Z"},
        {"record": "model_call_result", "result_id": "s1-m1", "output": {"text": None, "tool_call": {"name": "t", "args": {}}},
         "usage": None, "error": None, "at": "2026-12-01T00:00:00.000000Z"},
        {"record": "intent", "kind": "action", "step": 1, "attempt": 1, "result_id": "s1-a1 --executed; touch x #",
         "tool": "t", "args": {}, "replay": "never", "idempotency_key": "pl-" + "0" * 32, "at": "2026-12-01T00:00:00.000000Z"},
    ]
    log.write_text("".join(json.dumps(x) + "\n" for x in lines))
    doc = cli("inspect", "evil", "--json").json()
    assert doc["status"] == "corrupt"
    assert any("rule" in p or "derives" in p for p in doc["problems"]), doc["problems"]
    assert cli("verify", str(cli.runs)).code == 1
    assert cli("resume", "evil").code == 1
