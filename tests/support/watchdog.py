"""A watchdog for tests that open FIFOs and links: a regression fails with "hung" instead of hanging the suite.

Import `watchdog` into a test module (it is autouse there).
"""

from __future__ import annotations

import os
import signal
import stat

import pytest

WATCHDOG = 5.0  # seconds; every case here takes milliseconds


class Hung(Exception):
    pass


@pytest.fixture(autouse=True)
def watchdog(tmp_path):
    """Interrupt a blocked system call in the main thread (e.g. `open` of a FIFO) after WATCHDOG s.

    When it fires, every FIFO of the test is opened for writing once, so
    that a thread a regression left blocked in `open` wakes up too and the
    session can end.
    """

    def fire(signum, frame):
        for path in tmp_path.rglob("*"):
            if stat.S_ISFIFO(path.lstat().st_mode):
                os.close(os.open(path, os.O_RDWR | os.O_NONBLOCK))
        raise Hung(f"hung for {WATCHDOG}s: a FIFO or a link was waited on")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, WATCHDOG)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
