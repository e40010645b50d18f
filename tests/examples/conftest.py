"""Fixtures for running the examples: as scripts, through the real `polyloop` CLI, and in-process."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
from example_helpers import EXAMPLES, LEAKY, Runner, clean_env, console_script
from support.cli import READING, polyloop_quick
from support import forking


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(LEAKY):
            monkeypatch.delenv(name)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A fresh directory that looks like a checkout: `examples/` is there, nothing else."""
    (tmp_path / "examples").symlink_to(EXAMPLES, target_is_directory=True)
    return tmp_path


def _runner(workdir: Path, prefix: Callable[[str], list[str]]) -> Runner:
    def run(first: str, *args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return forking.run([*prefix(first), *args], cwd=workdir, env=clean_env(**(env or {})), timeout=timeout,
                           stdin=subprocess.DEVNULL)

    return run


@pytest.fixture
def polyloop(workdir: Path) -> Runner:
    """Run `polyloop ARGS...` in `workdir`, as a newcomer would type it: the commands that only
    read or settle a log in this process (support.cli.READING), the others as processes."""
    as_process = _runner(workdir, lambda command: [*console_script(), command])

    def run(first: str, *args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        if first not in READING:
            return as_process(first, *args, env=env, timeout=timeout)
        done = polyloop_quick(first, *args, cwd=workdir, env=clean_env(**(env or {})))
        return subprocess.CompletedProcess([first, *args], done.code, done.stdout, done.stderr)

    return run


@pytest.fixture
def python(workdir: Path) -> Runner:
    """Run `python examples/NAME.py ARGS...` in `workdir`."""
    return _runner(workdir, lambda script: [sys.executable, f"examples/{script}"])


@pytest.fixture
def load_example(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], ModuleType]]:
    """Import `examples/NAME.py` in-process (with its siblings importable, as the CLI does)."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    loaded: list[str] = []

    def load(name: str) -> ModuleType:
        module_name = f"_example_{name}"
        spec = importlib.util.spec_from_file_location(module_name, EXAMPLES / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        loaded.append(module_name)
        spec.loader.exec_module(module)
        return module

    yield load
    for module_name in loaded:
        sys.modules.pop(module_name, None)
