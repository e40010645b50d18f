"""The command line imports a command's module only when that command runs (or shows its help)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from cli_helpers import clean_env

from polyloop_cli.main import COMMANDS

# Run the app in-process in a fresh interpreter, then list the command line's modules it imported.
_PROBE = """
import json, sys
from typer.main import get_command
from polyloop_cli.main import app
code = get_command(app).main(sys.argv[1:], standalone_mode=False)
sys.stdout.write("\\n" + json.dumps([m for m in sys.modules if m.startswith("polyloop_cli.")]) + "\\n")
sys.exit(code)
"""

_COMMAND_MODULES = {f"polyloop_cli.{module}" for module, _, _ in COMMANDS.values()} | {"polyloop_cli.batch_view"}


def _imported(*args: str) -> tuple[set[str], str]:
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, *args],
        env=clean_env(COLUMNS="80"), capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc
    shown, _, modules = proc.stdout.rstrip("\n").rpartition("\n")
    return set(json.loads(modules)), shown


def test_ls_help_imports_ls_and_no_other_command():
    imported, shown = _imported("ls", "--help")
    assert "Usage: polyloop ls" in shown
    assert "polyloop_cli.ls" in imported
    assert not (imported & _COMMAND_MODULES) - {"polyloop_cli.ls"}, sorted(imported)
    assert {"polyloop_cli.batch", "polyloop_cli.worker", "polyloop_cli.batch_view"}.isdisjoint(imported)


def test_the_listing_of_every_command_imports_none():
    imported, shown = _imported("--help")
    for name in COMMANDS:  # the exact listing is checked against docs/reference/cli.md
        assert f"\n  {name} " in shown, name
    assert not imported & _COMMAND_MODULES, sorted(imported)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_listed_command_can_be_made(name):
    from polyloop_cli.main import create_command

    assert create_command(name).name == name
