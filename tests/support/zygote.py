"""A Python that has imported PolyLoop and its command line once, and forks a process per request.

Started by `support.forking` (one per test process), it answers each request
— a command line, its directory, its whole environment and three file
descriptors for its stdin, stdout and stderr — by forking a child that runs
it: `polyloop ARGS` (the console script's `main`), or `python SCRIPT ARGS`
(the script as `__main__`). The child is a real process with its own pid:
it may be SIGKILLed, may kill itself, writes its files and exits as a
freshly started one would, only without paying Python's start and
PolyLoop's imports again (most of a short command's CPU). It ends by the
interpreter's own exit (atexit handlers, flushed streams, the exit code of
`SystemExit` or 1 with a traceback).

The zygote writes back, on the request's connection, the child's pid, then
its exit status as `subprocess` gives it (negative: the signal). It ends
when its stdin reaches end of file (the test process is gone).
"""

from __future__ import annotations

import atexit
import gc
import io
import os
import runpy
import selectors
import signal
import socket
import struct
import sys
import threading
from collections.abc import Callable
from typing import Any

import orjson


def _receive(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 3)
    while len(data) < 4 or len(data) < 4 + struct.unpack("!I", data[:4])[0]:
        more = conn.recv(1 << 16)
        if not more:
            raise EOFError("the request was cut short")
        data += more
    return orjson.loads(data[4:]), fds


def serve(path: str) -> tuple[dict[str, Any], list[int]]:
    """Fork a child per request; returns only in a child, with its request and descriptors."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".new")
    listener.listen(64)
    os.rename(path + ".new", path)  # the path appears only once it listens: no refused first connect
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    selector.register(sys.stdin.fileno(), selectors.EVENT_READ)
    waiting: dict[int, socket.socket] = {}
    while True:
        for key, _events in selector.select():
            if key.fileobj is listener:
                conn, _ = listener.accept()
                request, fds = _receive(conn)
                pid = os.fork()
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    selector.close()
                    for held in (listener, conn, *waiting.values()):
                        held.close()
                    os.close(wake_r)
                    os.close(wake_w)
                    return request, fds
                for fd in fds:
                    os.close(fd)
                conn.sendall(b"%d\n" % pid)
                waiting[pid] = conn
            elif key.fileobj == wake_r:
                os.read(wake_r, 512)
                _reap(waiting)
            elif not os.read(sys.stdin.fileno(), 512):
                sys.exit(0)  # the test process is gone


def _reap(waiting: dict[int, socket.socket]) -> None:
    while waiting:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = waiting.pop(pid, None)
        if conn is not None:
            try:
                conn.sendall(b"%d\n" % os.waitstatus_to_exitcode(status))
            except OSError:
                pass  # the test stopped listening (it killed the child on a timeout)
            conn.close()


def _stdio() -> None:
    """The three standard streams as a freshly started interpreter opens them on fds 0, 1, 2."""
    encoding = os.environ.get("PYTHONIOENCODING", "utf-8").partition(":")[0] or "utf-8"
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))

    def stream(fd: int, mode: str, errors: str) -> io.TextIOWrapper:
        raw = io.FileIO(fd, mode, closefd=False)
        tty = raw.isatty()
        buffered: Any = io.BufferedReader(raw) if mode == "r" else io.BufferedWriter(raw)
        return io.TextIOWrapper(buffered, encoding=encoding, errors=errors,
                                line_buffering=(mode == "w" and (tty or unbuffered or fd == 2)),
                                write_through=unbuffered and mode == "w")

    sys.stdin = sys.__stdin__ = stream(0, "r", "strict")
    sys.stdout = sys.__stdout__ = stream(1, "w", "strict")
    sys.stderr = sys.__stderr__ = stream(2, "w", "backslashreplace")


def become(request: dict[str, Any], fds: list[int]) -> None:
    """Turn this forked child into the requested process (its streams, directory, environment, argv)."""
    for target, fd in zip((0, 1, 2), fds):
        os.dup2(fd, target)
    for fd in set(fds) - {0, 1, 2}:
        os.close(fd)
    if request["new_session"]:
        os.setsid()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for name in ("SIGTERM", "SIGHUP", "SIGPIPE", "SIGQUIT", "SIGUSR1", "SIGUSR2"):
        signal.signal(getattr(signal, name), signal.SIG_IGN if name == "SIGPIPE" else signal.SIG_DFL)
    _stdio()
    sys.argv = list(request["argv"])
    path0 = request["path0"]
    sys.path[0] = os.getcwd() if path0 is None else os.path.dirname(os.path.abspath(path0))


def end_as_python(program: Callable[[], object]) -> None:
    """Run `program`, then end as the interpreter would: its exit code, threads joined, atexit run.

    What the interpreter's own exit adds after that, tearing down every module
    and object, is skipped (`os._exit`): in a child of the zygote it would
    touch, and so copy, every page the zygote shares with it (~0.2 s).
    """
    try:
        program()
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except KeyboardInterrupt:
        _flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)  # as Python ends on an uncaught Ctrl-C: by the signal
        code = 130
    except BaseException:  # noqa: BLE001 - as Python does: the traceback, exit code 1
        kind, error, tb = sys.exc_info()
        while tb is not None and tb.tb_frame.f_code.co_filename in (__file__, "<frozen runpy>"):
            tb = tb.tb_next  # the traceback starts in the program, as Python's own does
        sys.excepthook(kind, error, tb)  # type: ignore[arg-type]
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]  # the non-daemon threads, as at exit
    atexit._run_exitfuncs()
    _flush()
    os._exit(code)


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


if __name__ == "__main__":
    import importlib

    import polyloop.anthropic  # noqa: F401 - the model adapters (~1.2 s each to import) many
    import polyloop.openai  # noqa: F401     children's agents and fake servers load
    import polyloop.testing  # noqa: F401 - what the scripts the tests run import
    from polyloop_cli.entry import main
    from polyloop_cli.main import COMMANDS

    for module in {module for module, _function, _line in COMMANDS.values()}:
        importlib.import_module(f"polyloop_cli.{module}")  # the imports each command would pay, paid once

    del sys.path[0]  # this file's directory: a child gets its own first entry, as Python gives it
    sys.path.insert(0, "")
    gc.freeze()  # what is imported stays shared with the children: no collection touches it
    request, fds = serve(sys.argv[1])
    become(request, fds)
    if request["kind"] == "cli":
        end_as_python(main)
    else:
        end_as_python(lambda: runpy.run_path(request["argv"][0], run_name="__main__"))
