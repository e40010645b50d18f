"""Helpers the test packages share, written once: the `polyloop` command runner, the kill-cue store.

Importable as `support` from any test module and from the child scripts the crash
tests start (they put `tests/` on `sys.path` first).
"""
