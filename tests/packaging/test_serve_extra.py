"""The `serve` extra stays optional: the core never imports it; without it `polyloop serve` says what to install."""

from __future__ import annotations

import subprocess
import sys

from support.cli import clean_env

EXTRA = ("starlette", "jinja2", "uvicorn", "playwright")

_BLOCKED = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ImportError(f"No module named {{name!r}} (blocked by the test)")
sys.meta_path.insert(0, Block())
from polyloop_cli.entry import main
sys.argv = ["polyloop", *sys.argv[1:]]
main()
"""


def test_the_library_and_the_command_line_never_import_the_serve_extra() -> None:
    code = ("import sys, polyloop, polyloop.stores, polyloop.testing, polyloop.for_cli, polyloop_cli.main; "
            f"print(sorted(m for m in {EXTRA!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_without_the_extra_serve_says_what_to_install_in_one_line_exit_2(tmp_path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _BLOCKED.format(blocked=set(EXTRA)), "serve", "--dir", str(tmp_path), "--port", "0"],
        capture_output=True, text=True, timeout=60, env=clean_env(), stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, proc
    assert "pip install 'polyloop[serve]'" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_a_host_others_can_reach_needs_allow_remote(tmp_path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "polyloop", "serve", "--dir", str(tmp_path), "--host", "0.0.0.0", "--port", "0"],
        capture_output=True, text=True, timeout=60, env=clean_env(), stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, proc
    assert "--allow-remote" in proc.stderr and "TLS" in proc.stderr and "Traceback" not in proc.stderr
