"""Helpers shared by the example tests (a unique module name: `conftest` is ambiguous across test dirs)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import support.cli
from support.cli import console_script  # noqa: F401 (re-exported to the example tests)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# Nothing from the developer's shell may leak into an example run (least of all a real API key).
LEAKY = ("POLYLOOP_", "OPENAI_", "ANTHROPIC_", "PAYMENTS_", "PYTEST_", "FORCE_COLOR", "COLUMNS")

Runner = Callable[..., subprocess.CompletedProcess[str]]


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without anything PolyLoop, OpenAI or the examples read."""
    return support.cli.clean_env(leaky=LEAKY, **extra)
