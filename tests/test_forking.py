"""The suite's forked processes (tests/support/forking.py) behave as the processes they stand for.

Many tests start `polyloop` as a child forked from a zygote that imported the
CLI once, and the docs tests' shells find a `polyloop` shim that does the
same: each must still be its own process, with its own pid, directory,
environment and streams, and end with its exit code or its signal.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support import forking

pytestmark = pytest.mark.skipif(not forking.enabled(), reason="POLYLOOP_TEST_EXEC=1: every process is exec'd")

SCRIPT = """
import os, sys
print(os.getpid(), os.getppid(), os.getcwd(), os.environ.get("WHO"), repr(sys.stdin.read()), flush=True)
print("to stderr", file=sys.stderr)
if len(sys.argv) > 1 and sys.argv[1] == "die":
    os.kill(os.getpid(), 9)
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
"""


def test_a_forked_script_is_its_own_process_with_its_own_directory_environment_and_code(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(SCRIPT)
    done = forking.run([sys.executable, str(script), "7"], cwd=tmp_path, env={**os.environ, "WHO": "alice"},
                       stdin=subprocess.DEVNULL)
    pid, parent, cwd, who, given = done.stdout.split()
    assert int(parent) != os.getpid()  # forked by the zygote, not started by this process
    assert int(pid) != os.getpid() and cwd == str(tmp_path) and who == "alice" and given == "''"
    assert done.returncode == 7 and done.stderr == "to stderr\n"
    killed = forking.run([sys.executable, str(script), "die"], cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert killed.returncode == -signal.SIGKILL


def test_a_shell_runs_the_console_shim_as_polyloop_with_its_streams_and_exit_codes(tmp_path: Path) -> None:
    shims = tmp_path / "shims"
    shims.mkdir()
    assert forking.console_shim(shims) is not None
    env = {**os.environ, "PATH": f"{shims}{os.pathsep}{os.environ['PATH']}"}

    def sh(command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=60)

    assert sh("command -v polyloop").stdout.strip() == str(shims / "polyloop")
    version = sh("polyloop --version")
    assert version.returncode == 0 and version.stdout.startswith("polyloop ")
    missing = sh("polyloop inspect nope --dir runs; echo code=$?")
    assert "code=2" in missing.stdout and "no run 'nope'" in missing.stderr
    piped = sh("mkdir -p runs && polyloop ls --dir runs --json | cat")  # the forked child writes into the shell's pipe
    assert piped.returncode == 0 and piped.stdout.strip() == "[]"
    crashed = sh("POLYLOOP_DEMO_CRASH=1 polyloop demo --run-id c --dir runs; echo code=$?")
    assert "code=137" in crashed.stdout  # killed by SIGKILL, as the shell sees it
