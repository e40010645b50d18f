"""The console script's entry point: as little as possible runs before Ctrl-C is handled.

Importing the command line (typer, rich, the library) takes a moment; a
Ctrl-C in that moment must end like any other interruption — one line and
exit code 130 — not with a traceback.
"""

from __future__ import annotations

import sys


def main() -> None:
    """The `polyloop` console script (and `python -m polyloop`)."""
    try:
        from .main import main as run

        run()
    except KeyboardInterrupt:
        sys.stderr.write("polyloop: interrupted\n")
        sys.exit(130)
