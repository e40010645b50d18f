"""Real `polyloop` and PolyLoop-script processes, forked from a Python that has already imported them.

A short command spends most of its CPU starting Python and importing
PolyLoop's command line (~0.3 s); the suite starts about two thousand such
processes. `spawn` hands a command line to a zygote (`support.zygote`,
started once per test process) that forks a child for it: a real process
with its own pid, its own stdin/stdout/stderr pipes, the given directory
and whole environment, that may be SIGKILLed or kill itself, and that
exits as `python` would. Only the start is skipped.

Forked: `polyloop ARGS` (the console script), `python -m polyloop ARGS`
and `python SCRIPT ARGS` with this interpreter. Anything else (another
program, `python -c`, other Python options) returns None: the caller runs
it with `subprocess`. `POLYLOOP_TEST_EXEC=1` turns forking off, so every
process is exec'd as before.
"""

from __future__ import annotations

import atexit
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import orjson

ZYGOTE = Path(__file__).with_name("zygote.py")
CONSOLE_SCRIPT = str(Path(sys.executable).with_name("polyloop"))

_lock = threading.Lock()
_zygote: tuple[subprocess.Popen[bytes], str] | None = None


def enabled() -> bool:
    return not os.environ.get("POLYLOOP_TEST_EXEC")


def _request_for(argv: Sequence[str]) -> dict[str, Any] | None:
    """What the zygote is asked to run for `argv`, or None when it is not a process it can fork."""
    args = [os.fspath(a) for a in argv]
    if not args:
        return None
    if args[0] == CONSOLE_SCRIPT:
        return {"kind": "cli", "argv": args, "path0": CONSOLE_SCRIPT}
    if args[0] != sys.executable or len(args) < 2:
        return None
    if args[1:3] == ["-m", "polyloop"]:
        return {"kind": "cli", "argv": [str(Path(__file__).parents[2] / "polyloop" / "__main__.py"), *args[3:]],
                "path0": None}  # `python -m`: the first entry of sys.path is the directory it runs in
    if args[1].startswith("-") or not args[1].endswith(".py"):
        return None
    return {"kind": "script", "argv": [args[1], *args[2:]], "path0": args[1]}


# What Python reads only as it starts (PYTHONPATH, PYTHONHASHSEED, ...), but for these, which a
# child reads again (`support.zygote`): an environment that sets another such value is exec'd.
_READ_AGAIN = ("PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED", "PYTHONIOENCODING")


def _starts_otherwise(env: Mapping[str, str]) -> bool:
    """Whether a Python started with `env` would differ from the zygote (started with this process's)."""
    names = {k for k in (*env, *_zygote_env) if k.startswith("PYTHON") and k not in _READ_AGAIN}
    return any(env.get(k) != _zygote_env.get(k) for k in names)


_zygote_env = {k: v for k, v in os.environ.items() if not k.startswith(("POLYLOOP_", "OTEL_", "PYTEST_"))}


def _start() -> tuple[subprocess.Popen[bytes], str]:
    global _zygote
    with _lock:
        if _zygote is None or _zygote[0].poll() is not None:
            path = os.path.join(tempfile.mkdtemp(prefix="polyloop-zygote-"), "socket")
            proc = subprocess.Popen([sys.executable, str(ZYGOTE), path], stdin=subprocess.PIPE,
                                    stdout=subprocess.DEVNULL, env=_zygote_env)
            deadline = time.monotonic() + 60
            while not os.path.exists(path):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the test zygote did not start")
                time.sleep(0.01)
            _zygote = (proc, path)
            atexit.register(_stop, proc)
        return _zygote


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.stdin is not None:
        proc.stdin.close()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()


class Forked:
    """The subset of `subprocess.Popen` the tests use, for a process the zygote forked."""

    def __init__(self, args: Sequence[str], pid: int, status: socket.socket,
                 stdout: IO[Any] | None, stderr: IO[Any] | None) -> None:
        self.args = list(args)
        self.pid = pid
        self.stdout = stdout
        self.stderr = stderr
        self.stdin = None
        self.returncode: int | None = None
        self._status = status
        self._line = b""

    def _read_status(self, timeout: float | None) -> int | None:
        if self.returncode is not None:
            return self.returncode
        self._status.settimeout(timeout)
        try:
            while not self._line.endswith(b"\n"):
                more = self._status.recv(64)
                if not more:
                    raise RuntimeError(f"the test zygote died while process {self.pid} ran")
                self._line += more
        except (TimeoutError, BlockingIOError):
            return None
        self.returncode = int(self._line)
        self._status.close()
        return self.returncode

    def poll(self) -> int | None:
        return self._read_status(0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._read_status(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return code

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def communicate(self, input: Any = None, timeout: float | None = None) -> tuple[Any, Any]:
        """Read stdout and stderr to their end, then wait: as `Popen.communicate` (no input)."""
        if input:
            raise ValueError("a forked process's stdin is closed or inherited; it takes no input")
        deadline = None if timeout is None else time.monotonic() + timeout
        chunks: dict[Any, list[Any]] = {}
        with selectors.DefaultSelector() as selector:
            for stream in (self.stdout, self.stderr):
                if stream is not None and not stream.closed:
                    chunks[stream] = []
                    selector.register(stream, selectors.EVENT_READ)
            while selector.get_map():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(self.args, timeout or 0)
                for key, _ in selector.select(left):
                    stream = key.fileobj
                    data = os.read(stream.fileno(), 1 << 16)
                    if data:
                        chunks[stream].append(data)
                    else:
                        selector.unregister(stream)
        outputs = []
        for stream in (self.stdout, self.stderr):
            if stream is None or stream not in chunks:
                outputs.append(None)
                continue
            # As `text=True` reads a pipe: UTF-8 (this machine's locale), universal newlines.
            outputs.append(b"".join(chunks[stream]).decode().replace("\r\n", "\n").replace("\r", "\n"))
            stream.close()
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return outputs[0], outputs[1]

    def __enter__(self) -> Forked:
        return self

    def __exit__(self, *exc: object) -> None:
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        self.wait()


class _ReadEnd:
    """The read end of a child's stdout or stderr pipe (raw bytes; `communicate` decodes them)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self.closed = False

    def fileno(self) -> int:
        return self._fd

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            os.close(self._fd)


def _end(choice: Any, fd_if_inherit: int) -> tuple[int, int | None]:
    """(the fd the child gets, the fd this process keeps to read) for a stdout/stderr choice."""
    if choice == subprocess.PIPE:
        read, write = os.pipe()
        return write, read
    if choice == subprocess.DEVNULL:
        return os.open(os.devnull, os.O_WRONLY), None
    if choice is None:
        return os.dup(fd_if_inherit), None
    return os.dup(choice if isinstance(choice, int) else choice.fileno()), None


def spawn(argv: Sequence[str], *, cwd: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None,
          stdin: Any = None, stdout: Any = None, stderr: Any = None, text: bool = False,
          start_new_session: bool = False, **other: Any) -> Forked | None:
    """Fork `argv` from the zygote with these `subprocess.Popen` arguments, or None (run it yourself)."""
    plain = not other and text and stdin in (None, subprocess.DEVNULL) and subprocess.STDOUT not in (stdout, stderr)
    request = _request_for(argv) if enabled() and plain else None
    env = dict(os.environ if env is None else env)
    if request is None or _starts_otherwise(env):
        return None
    request.update(cwd=os.path.abspath(os.fspath(cwd or os.getcwd())), new_session=start_new_session,
                   env=env)
    _proc, path = _start()
    given_in = os.open(os.devnull, os.O_RDONLY) if stdin == subprocess.DEVNULL else os.dup(0)
    given_out, keep_out = _end(stdout, 1)
    given_err, keep_err = _end(stderr, 2)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
        payload = orjson.dumps(request)
        socket.send_fds(conn, [struct.pack("!I", len(payload)) + payload], [given_in, given_out, given_err])
    finally:
        for fd in (given_in, given_out, given_err):
            os.close(fd)
    line = b""
    while not line.endswith(b"\n"):
        more = conn.recv(64)
        if not more:
            raise RuntimeError("the test zygote did not fork the process")
        line += more
    pid, _, rest = line.partition(b"\n")
    forked = Forked(argv, int(pid), conn,
                    _ReadEnd(keep_out) if keep_out is not None else None,
                    _ReadEnd(keep_err) if keep_err is not None else None)
    forked._line = rest
    return forked


def popen(argv: Sequence[str], **how: Any) -> Forked | subprocess.Popen[Any]:
    """`subprocess.Popen(argv, **how)`, forked from the zygote when it can be (`spawn`)."""
    return spawn(argv, **how) or subprocess.Popen(argv, **how)


def run(argv: Sequence[str], *, timeout: float | None = None, capture_output: bool = True, text: bool = True,
        **popen: Any) -> subprocess.CompletedProcess[Any]:
    """`subprocess.run(argv, capture_output=True, text=True, ...)`, forked when it can be."""
    if not (capture_output and text):
        return subprocess.run(argv, capture_output=capture_output, text=text, timeout=timeout, **popen)
    forked = spawn(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)
    if forked is None:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **popen)
    try:
        out, err = forked.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        forked.kill()
        forked.communicate()
        raise
    return subprocess.CompletedProcess(list(argv), forked.wait(), out, err)


# The `polyloop` a shell finds first on PATH (see `console_shim`): a Python without site-packages
# (~15 ms to start) that hands its own argv, directory, environment and stdin/stdout/stderr to the
# zygote, forwards the signals a shell or `timeout` sends it, and ends as the forked child ended.
_SHIM = '''#!{python} -SE
import json, os, signal, socket, struct, sys
SOCKET, CONSOLE_SCRIPT, ZYGOTE_PYTHON_ENV, READ_AGAIN = {socket!r}, {console!r}, {python_env!r}, {read_again!r}
env = dict(os.environ)
names = {{k for k in (*env, *ZYGOTE_PYTHON_ENV) if k.startswith("PYTHON") and k not in READ_AGAIN}}
if any(env.get(k) != ZYGOTE_PYTHON_ENV.get(k) for k in names):
    os.execv(CONSOLE_SCRIPT, [CONSOLE_SCRIPT, *sys.argv[1:]])  # a Python started otherwise: start it
request = {{"kind": "cli", "argv": [CONSOLE_SCRIPT, *sys.argv[1:]], "path0": CONSOLE_SCRIPT,
            "cwd": os.getcwd(), "env": env, "new_session": False}}
payload = json.dumps(request).encode()
conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    conn.connect(SOCKET)
except OSError:
    os.execv(CONSOLE_SCRIPT, [CONSOLE_SCRIPT, *sys.argv[1:]])  # no zygote (its test has ended)
socket.send_fds(conn, [struct.pack("!I", len(payload)) + payload], [0, 1, 2])
reply = b""
child = None
def forward(signum, frame):
    if child is not None:
        os.kill(child, signum)
for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2"):
    signal.signal(getattr(signal, name), forward)
while True:
    more = conn.recv(64)
    if not more:
        sys.exit("polyloop (test zygote): the forked process was lost")
    reply += more
    lines = reply.split(b"\\n")
    if child is None and len(lines) > 1:
        child = int(lines[0])
    if len(lines) > 2:
        code = int(lines[1])
        break
if code < 0:  # ended by a signal: so does this process (SIGKILL and SIGSTOP cannot be handled)
    if -code not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
sys.exit(code)
'''


def console_shim(directory: Path) -> Path | None:
    """Write a `polyloop` into `directory` that a shell runs as a process forked from the zygote.

    Put `directory` first on the PATH of a shell that runs documented commands:
    each `polyloop` it starts is then a real child of the zygote (its own pid,
    the shell's stdin/stdout/stderr, directory and environment, its exit code
    or signal passed back), while the shim in between costs a Python start
    without site-packages. None when forking is off (`POLYLOOP_TEST_EXEC=1`).
    """
    if not enabled():
        return None
    _proc, path = _start()
    python_env = {k: v for k, v in _zygote_env.items() if k.startswith("PYTHON") and k not in _READ_AGAIN}
    shim = directory / "polyloop"
    shim.write_text(_SHIM.format(python=sys.executable, socket=path, console=CONSOLE_SCRIPT,
                                 python_env=python_env, read_again=_READ_AGAIN))
    shim.chmod(0o755)
    return shim


_shims: Path | None = None


def shell_path(path: str) -> str:
    """`path` (a PATH) with a directory holding this process's `console_shim` first, when forking is on."""
    global _shims
    if not enabled():
        return path
    if _shims is None or not (_shims / "polyloop").exists() or _zygote is None or _zygote[0].poll() is not None:
        shims = Path(tempfile.mkdtemp(prefix="polyloop-shims-"))
        console_shim(shims)
        _shims = shims
    return f"{_shims}{os.pathsep}{path}"
