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
        _interrupted()
    except RuntimeError as exc:
        # A Ctrl-C inside a class body's `__set_name__` (rich has some) reaches
        # us wrapped in a RuntimeError.
        if isinstance(exc.__cause__, KeyboardInterrupt):
            _interrupted()
        raise


def _interrupted() -> None:
    sys.stderr.write("polyloop: interrupted\n")
    sys.exit(130)
