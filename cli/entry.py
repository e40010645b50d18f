"""The console script's entry point: as little as possible runs before Ctrl-C is handled.

Importing the command line (typer, rich, pydantic, the library) takes a
moment. A Ctrl-C in that moment is held until the imports are done — a
KeyboardInterrupt raised inside an extension module's initialisation can
crash the interpreter — and then ends like any other interruption: one
line and exit code 130, never a traceback.
"""

from __future__ import annotations

import signal
import sys


def main() -> None:
    """The `polyloop` console script (and `python -m polyloop`)."""
    pressed: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: pressed.append(signum))
    try:
        from .main import main as run
    finally:
        signal.signal(signal.SIGINT, previous)
    if pressed:
        _interrupted()
    try:
        run()
    except KeyboardInterrupt:
        _interrupted()
    except RuntimeError as exc:
        # A Ctrl-C inside a class body's `__set_name__` reaches us wrapped in a RuntimeError.
        if isinstance(exc.__cause__, KeyboardInterrupt):
            _interrupted()
        raise


def _interrupted() -> None:
    sys.stderr.write("polyloop: interrupted\n")
    sys.exit(130)
