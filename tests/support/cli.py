"""Running the real `polyloop` console script in a subprocess, as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import forking

# What the developer's shell may set that a `polyloop` process reads (or that changes how it prints).
LEAKY = ("POLYLOOP_", "FORCE_COLOR", "PYTEST_", "OTEL_")


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

    @property
    def returncode(self) -> int:
        """`code`, under the name `subprocess.CompletedProcess` gives it."""
        return self.code


def polyloop(*args: str, cwd: Path | str | None = None, env: dict[str, str] | None = None,
             timeout: float = 60) -> Done:
    """`polyloop ARGS...` in `cwd` with `env` (default: a clean one), stdin closed: a real process,
    forked from one that has already imported the CLI (`support.forking`)."""
    proc = forking.run([*console_script(), *args], cwd=cwd, env=clean_env() if env is None else env,
                       timeout=timeout, stdin=subprocess.DEVNULL)
    return Done(proc.returncode, proc.stdout, proc.stderr)


# One in-process command at a time: the runner swaps this process's stdout, stderr, environ and cwd.
IN_PROCESS = threading.Lock()


def polyloop_in_process(*args: str, cwd: Path | str | None = None, env: dict[str, str] | None = None) -> Done:
    """`polyloop ARGS...` as the typer app called in this process, `env` its whole environment.

    The same arguments, exit code, stdout and stderr as a `polyloop` process, without a
    Python start and the CLI's imports (most of a short command's time). For commands
    that read or settle a log (inspect, verify, mark-resolved, resume of a run whose
    agent reads its knobs at call time); what must die or be raced runs as a process.
    An exception the CLI let through is appended to stderr as a traceback.
    """
    from polyloop_cli.main import app  # the test process imports the CLI only when it needs it
    from typer.testing import CliRunner

    env = clean_env() if env is None else env
    with IN_PROCESS:
        unset: dict[str, str | None] = {k: None for k in os.environ if k not in env}
        before = os.getcwd()
        if cwd is not None:
            os.chdir(cwd)
        try:
            result = CliRunner().invoke(app, list(args), env={**unset, **env})
        finally:
            os.chdir(before)
    err = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        err += "".join(traceback.format_exception(result.exception))
    return Done(result.exit_code, result.stdout, err)


# Commands that read a log or settle one and start no agent: a test may call them in its own process
# (the same arguments, exit code and output, without a Python start and the CLI's imports). What runs
# an agent (which may SIGKILL its own process), waits, follows or races runs as a real process.
READING = frozenset({"inspect", "verify", "ls", "approve", "deny", "answer", "mark-resolved", "doctor"})


def polyloop_quick(*args: str, cwd: Path | str | None = None, env: dict[str, str] | None = None,
                   timeout: float = 60) -> Done:
    """`polyloop ARGS...`: in this process for the `READING` commands, else as a process."""
    if args and args[0] in READING:
        return polyloop_in_process(*args, cwd=cwd, env=env)
    return polyloop(*args, cwd=cwd, env=env, timeout=timeout)

