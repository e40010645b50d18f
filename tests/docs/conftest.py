"""A working directory that looks like a fresh checkout after the README's first command."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from docs_helpers import BIN, EXAMPLES

def make_workdir(where: Path) -> Path:
    """`where` with a copy of examples/ and a `.venv` whose bin/ leads to this interpreter's."""
    where.mkdir(parents=True, exist_ok=True)
    shutil.copytree(EXAMPLES, where / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    if sys.prefix != sys.base_prefix:  # the suite runs in a virtual environment: that one
        (where / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    else:
        venv_bin = where / ".venv" / "bin"
        venv_bin.mkdir(parents=True)
        (venv_bin / "activate").write_text(f'PATH="{BIN}:$PATH"; export PATH\n')
        for name in ("polyloop", "python"):
            if (BIN / name).exists():
                (venv_bin / name).symlink_to(BIN / name)
    return where


@pytest.fixture
def workdir_factory(tmp_path: Path) -> Callable[[str], Path]:
    def make(name: str) -> Path:
        return make_workdir(tmp_path / name)

    return make
