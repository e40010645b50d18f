"""Helpers shared by the example tests (a unique module name: `conftest` is ambiguous across test dirs)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# Nothing from the developer's shell may leak into an example run (least of all a real API key).
LEAKY = ("POLYLOOP_", "OPENAI_", "ANTHROPIC_", "PAYMENTS_", "PYTEST_", "FORCE_COLOR", "COLUMNS")

Runner = Callable[..., subprocess.CompletedProcess[str]]


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without anything PolyLoop, OpenAI or the examples read."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(LEAKY)}
    env.update(extra)
    return env


def console_script() -> list[str]:
    """The installed `polyloop` entry point next to this interpreter (else `-m polyloop`)."""
    script = Path(sys.executable).with_name("polyloop")
    return [str(script)] if script.exists() else [sys.executable, "-m", "polyloop"]
