"""Helpers of the `polyloop watch` and completion tests: a gated run, a watcher in a pipe or a
pseudo-terminal, and bash completing a command line.

Used by tests/cli/test_cli_watch.py, test_cli_completion.py and tests/postgres/test_pg_watch.py.
"""

from __future__ import annotations

import fcntl
import os
import pty
import queue
import re
import struct
import subprocess
import termios
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cli_helpers import clean_env, console_script
from support import forking

HERE = Path(__file__).resolve().parent
GATED = f"{HERE / 'watch_agents.py'}:gated_run"


def polyloop(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """`polyloop ARGS` started in `cwd`, its stdout and stderr piped."""
    return subprocess.Popen(
        [*console_script(), *args], cwd=cwd, env=clean_env(**(env or {})), stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
    )


def start_gated(run_id: str, where: list[str], gate: Path, cwd: Path) -> subprocess.Popen[str]:
    """A run of three steps, each waiting for its gate file in `gate` (`watch_agents.py`)."""
    gate.mkdir(parents=True, exist_ok=True)
    return polyloop("run", GATED, "--goal", "pass the gates", "--run-id", run_id, *where, cwd=cwd,
                    env={"POLYLOOP_TEST_GATE": str(gate)})


@contextmanager
def ended(proc: subprocess.Popen[str], lines: Lines | None = None) -> Iterator[subprocess.Popen[str]]:
    """`proc`, killed if it still runs when the block ends, then reaped, its pipes closed."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)
        if lines is not None:
            lines.thread.join(timeout=30)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def open_gate(gate: Path, step: int) -> None:
    (gate / str(step)).write_text("open")


class Lines:
    """The lines of a child's stream as they arrive (read by a thread), awaited with a deadline."""

    def __init__(self, stream) -> None:  # type: ignore[no-untyped-def]
        self.seen: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream) -> None:  # type: ignore[no-untyped-def]
        for line in iter(stream.readline, ""):
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def until(self, needle: str, timeout: float = 60) -> str:
        """The first line from now on that contains `needle` (fails after `timeout` or at the end)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no line with {needle!r} in {timeout} s; seen: {self.seen}") from None
            if line is None:
                raise AssertionError(f"the stream ended without {needle!r}; seen: {self.seen}")
            self.seen.append(line)
            if needle in line:
                return line

    def rest(self, timeout: float = 60) -> list[str]:
        """Every line until the stream ends."""
        deadline = time.monotonic() + timeout
        out = []
        while (line := self._queue.get(timeout=max(0.0, deadline - time.monotonic()))) is not None:
            self.seen.append(line)
            out.append(line)
        return out


class Screen:
    """A child whose stdin, stdout and stderr are a pseudo-terminal, and everything it drew there."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str]) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave,
                                     start_new_session=True)
        os.close(slave)
        self._master = master
        self._data = bytearray()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self._master, 65536)
            except OSError:  # EIO: the child closed its side
                break
            if not chunk:
                break
            with self._lock:
                self._data += chunk

    @property
    def text(self) -> str:
        with self._lock:
            return self._data.decode("utf-8", "replace")

    @property
    def plain(self) -> str:
        """What was drawn, without escape sequences (styles, cursor movements)."""
        return _ESCAPES.sub("", self.text)

    def until(self, needle: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while needle not in self.plain:
            assert time.monotonic() < deadline, f"{needle!r} never appeared on the terminal: {self.text[-2000:]!r}"
            time.sleep(0.02)
        return self.text

    def wait(self, timeout: float = 60) -> int:
        code = self.proc.wait(timeout=timeout)
        self._thread.join(timeout=5)
        os.close(self._master)
        return code


_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def terminal_env(**extra: str) -> dict[str, str]:
    return clean_env(TERM="xterm-256color", **extra)


BIN = str(Path(console_script()[0]).parent)


def bash_complete(cwd: Path, *words: str, env: dict[str, str] | None = None) -> list[str]:
    """COMPREPLY for the command line `words` (the last one is being completed), as bash computes it."""
    quoted = " ".join(_bash_quote(w) for w in words)
    script = (
        'eval "$(polyloop --show-completion)" || exit 9\n'
        f"COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}\n"
        "_polyloop_completion polyloop\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    environ = clean_env(**(env or {}))
    environ["PATH"] = forking.shell_path(f"{BIN}:{environ.get('PATH', '')}")
    proc = subprocess.run(["bash", "--norc", "--noprofile", "-c", script], cwd=cwd, env=environ,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc
    assert proc.stderr == "", proc.stderr  # never a traceback into the prompt
    return [line for line in proc.stdout.splitlines() if line]


def _bash_quote(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"
