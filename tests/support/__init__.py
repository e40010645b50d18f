"""Helpers the test packages share, written once: the `polyloop` command runner, the kill-cue store.

Importable as `support` from any test module and from the child scripts the crash
tests start (they put `tests/` on `sys.path` first). `ROOT` and `TESTS` name the
repository and its tests/ folder, so that a test's place in the tree is free to move.
"""

from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
ROOT = TESTS.parent
