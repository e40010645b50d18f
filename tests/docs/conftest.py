"""A working directory that looks like a fresh checkout after the README's first command."""

from __future__ import annotations

import shutil
import sys
import uuid
from collections.abc import Callable, Iterator
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


_PAGES_URL = "postgresql://postgres@127.0.0.1:5432/test"  # the server the pages' commands name


@pytest.fixture(autouse=True)
def private_pg_schema(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each page's PostgreSQL commands in a schema of their own ($PGOPTIONS, which libpq and the
    store honour for a URL without options): two pages run at once never claim each other's runs."""
    try:
        import psycopg

        conn = psycopg.connect(_PAGES_URL, autocommit=True, connect_timeout=3)
    except Exception:  # no server here: the pages that need one say so when they run
        yield
        return
    schema = f"polyloop_doc_{uuid.uuid4().hex[:10]}"
    with conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        monkeypatch.setenv("PGOPTIONS", f"-csearch_path={schema}")
        try:
            yield
        finally:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
