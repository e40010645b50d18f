"""Pausing the cyclic garbage collector while a log's objects are built (the read side's speed)."""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_gc_lock = threading.Lock()
_gc_pauses = 0
_gc_was_enabled = False


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while a log's objects are built.

    Reading a long log allocates hundreds of thousands of records that hold
    no reference cycles; the collector would walk the growing heap again and
    again for nothing (it doubled the cost of read + classify). Nested and
    concurrent pauses count, so only the last one out re-enables it, and only
    if it was enabled before.
    """
    global _gc_pauses, _gc_was_enabled
    with _gc_lock:
        if _gc_pauses == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pauses -= 1
            if _gc_pauses == 0 and _gc_was_enabled:
                gc.enable()
