"""Shell completion through typer's own mechanism, exercised by the shells themselves.

Bash sources the script `polyloop --show-completion` prints and calls its
completion function with COMP_WORDS/COMP_CWORD set, as it does on a <TAB>:
command names come from the lazy command table, run ids and what waits from
the store the words typed so far name.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import clean_env, console_script, target
from support import forking
from watch_helpers import bash_complete as _bash_complete


@pytest.fixture
def runs(cli):
    """Three runs: finished `alpha` and `beta`, and `mailer-1` stopped at an unknown `never` action."""
    for run_id in ("alpha", "beta"):
        assert cli("run", target("finishing"), "--goal", "g", "--run-id", run_id).code == 0
    done = cli("run", target("mailer"), "--goal", "g", "--run-id", "mailer-1", env={"POLYLOOP_TEST_KILL": "1"})
    assert done.code == -9
    return cli.runs


def test_bash_completes_command_names_from_the_lazy_table(tmp_path):
    assert _bash_complete(tmp_path, "polyloop", "w") == ["watch", "worker"]
    assert "mark-resolved" in _bash_complete(tmp_path, "polyloop", "")


def test_bash_completes_run_ids_from_the_directory_given(runs, tmp_path):
    assert sorted(_bash_complete(tmp_path, "polyloop", "inspect", "--dir", str(runs), "")) == [
        "alpha", "beta", "mailer-1"]
    assert _bash_complete(tmp_path, "polyloop", "watch", "--dir", str(runs), "a") == ["alpha"]
    assert _bash_complete(tmp_path, "polyloop", "resume", "m", env={"POLYLOOP_DIR": str(runs)}) == ["mailer-1"]


def test_bash_completes_the_ids_that_wait_in_the_run(runs, tmp_path):
    words = ("polyloop", "mark-resolved", "--dir", str(runs), "mailer-1", "")
    assert _bash_complete(tmp_path, *words) == ["s1-a1"]
    # approve takes approval requests only: an unknown action is not one
    assert _bash_complete(tmp_path, "polyloop", "approve", "--dir", str(runs), "mailer-1", "") == []


def test_completion_is_empty_never_an_error_when_the_store_cannot_be_read(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    assert _bash_complete(tmp_path, "polyloop", "inspect", "--dir", str(tmp_path / "file"), "") == []
    assert _bash_complete(tmp_path, "polyloop", "inspect", "--store", "mysql://x/y", "") == []
    started = time.monotonic()
    # a database that does not answer: the completion gives up within its short timeout
    words = ("polyloop", "inspect", "--store", "postgresql://nobody@127.0.0.1:9/none", "")
    assert _bash_complete(tmp_path, *words) == []
    assert time.monotonic() - started < 20


def test_completion_never_imports_every_command(tmp_path):
    probe = (
        "import os, sys, json\n"
        "os.environ.update(_POLYLOOP_COMPLETE='complete_bash', COMP_WORDS='polyloop w', COMP_CWORD='1')\n"
        "from polyloop_cli.main import app\n"
        "from typer.main import get_command\n"
        "try:\n"
        "    get_command(app).main([], prog_name='polyloop')\n"
        "except SystemExit:\n"
        "    pass\n"
        "sys.stderr.write(json.dumps(sorted(m for m in sys.modules if m.startswith('polyloop_cli.'))))\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=clean_env(), capture_output=True,
                          text=True, timeout=60)
    assert proc.stdout.split() == ["watch", "worker"]
    assert "polyloop_cli.worker" not in proc.stderr and "polyloop_cli.batch" not in proc.stderr


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_scripts_are_generated_and_parse(shell, tmp_path):
    environ = clean_env(_POLYLOOP_COMPLETE=f"source_{shell}")
    proc = forking.run(console_script(), env=environ, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc
    script = tmp_path / f"polyloop.{shell}"
    script.write_text(proc.stdout)
    assert "_POLYLOOP_COMPLETE=complete_" + shell in proc.stdout
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed: the script was generated but not parsed")
    check = [shell, "-n", str(script)] if shell == "zsh" else [shell, "--no-execute", str(script)]
    assert subprocess.run(check, capture_output=True, timeout=60).returncode == 0


def test_fish_completes_run_ids_and_what_waits(runs, tmp_path):
    if shutil.which("fish") is None:
        pytest.skip("fish is not installed")
    script = forking.run(console_script(), env=clean_env(_POLYLOOP_COMPLETE="source_fish"), capture_output=True,
                            text=True, timeout=60).stdout
    (tmp_path / "polyloop.fish").write_text(script)
    environ = clean_env(POLYLOOP_DIR=str(runs))
    environ["PATH"] = forking.shell_path(f"{Path(console_script()[0]).parent}:{environ.get('PATH', '')}")
    asked = 'source polyloop.fish; complete -C "polyloop watch "; complete -C "polyloop mark-resolved mailer-1 "'
    done = subprocess.run(["fish", "--no-config", "-c", asked], cwd=tmp_path, env=environ, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == "", done
    assert done.stdout.splitlines() == ["alpha", "beta", "mailer-1", "s1-a1\tunknown: send_email"]


def test_install_completion_writes_what_a_new_bash_then_uses(runs, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    environ = clean_env(HOME=str(home), POLYLOOP_DIR=str(runs), SHELL="/bin/bash")  # typer falls back to $SHELL
    environ["PATH"] = forking.shell_path(f"{Path(console_script()[0]).parent}:{environ.get('PATH', '')}")
    done = subprocess.run(["bash", "--norc", "-c", "polyloop --install-completion"], env=environ, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done
    assert "bash completion installed" in done.stdout
    later = ('source ~/.bashrc; COMP_WORDS=(polyloop resume al); COMP_CWORD=2; _polyloop_completion polyloop; '
             'printf "%s\\n" "${COMPREPLY[@]}"')
    done = subprocess.run(["bash", "--norc", "-c", later], env=environ, capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["alpha"], done
