"""The console script's entry point: as little as possible runs before Ctrl-C is handled.

Importing the command line (typer, rich, pydantic, the library) takes a
moment. A Ctrl-C in that moment is held until the imports are done — a
KeyboardInterrupt raised inside an extension module's initialisation can
crash the interpreter — and then ends like any other interruption: one
line and exit code 130, never a traceback.

Nothing here imports a module written in Python before the handler is set,
since a Ctrl-C landing in that module's code is a traceback from this file:
not `signal` (it builds enums as it loads; this uses `_signal`, the built-in
module it wraps) and not `__future__` (a `.py` file, loaded at start-up only
when some `.pth` file happens to import it).
"""

import sys

import _signal


def main() -> None:
    """The `polyloop` console script (and `python -m polyloop`)."""
    pressed: list[int] = []
    previous = _signal.signal(_signal.SIGINT, lambda signum, frame: pressed.append(signum))
    try:
        from .main import main as run
    finally:
        _signal.signal(_signal.SIGINT, previous)
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
