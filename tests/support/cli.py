"""Running the real `polyloop` console script in a subprocess, as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# What the developer's shell may set that a `polyloop` process reads (or that changes how it prints).
LEAKY = ("POLYLOOP_", "FORCE_COLOR", "PYTEST_")


def console_script() -> list[str]:
    """The installed `polyloop` entry point next to this interpreter (else `-m polyloop`)."""
    script = Path(sys.executable).with_name("polyloop")
    return [str(script)] if script.exists() else [sys.executable, "-m", "polyloop"]


def clean_env(*, leaky: Sequence[str] = LEAKY, **extra: str) -> dict[str, str]:
    """This process's environment without the variables starting with `leaky`, nor COLUMNS."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(tuple(leaky))}
    env.pop("COLUMNS", None)
    env.update(extra)
    return env


@dataclass
class Done:
    """A finished `polyloop` process."""

    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


def polyloop(*args: str, cwd: Path | str | None = None, env: dict[str, str] | None = None,
             timeout: float = 60) -> Done:
    """`polyloop ARGS...` in `cwd` with `env` (default: a clean one), stdin closed."""
    proc = subprocess.run([*console_script(), *args], cwd=cwd, env=clean_env() if env is None else env,
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    return Done(proc.returncode, proc.stdout, proc.stderr)
