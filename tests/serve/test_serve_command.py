"""`polyloop serve`'s refusals: one line, exit code 2, nothing served."""

from __future__ import annotations

import socket
from pathlib import Path

from support.cli import polyloop_in_process as polyloop

from polyloop.for_cli import add_user


def _one_line(done: object, *words: str) -> None:
    assert done.code == 2, done  # type: ignore[attr-defined]
    err = done.stderr.strip()  # type: ignore[attr-defined]
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in err, err


def test_a_port_in_use_is_refused_in_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        _one_line(polyloop("serve", "--dir", str(tmp_path), "--port", str(port)), f"cannot listen on 127.0.0.1:{port}")


def test_a_malformed_users_file_is_refused_in_one_line(tmp_path: Path) -> None:
    users = tmp_path / "operators.txt"
    users.write_text("ann decide not-a-hash\n")
    _one_line(polyloop("serve", "--dir", str(tmp_path), "--users", str(users), "--port", "0"),
              "operators.txt:1", "NAME ROLE HASH")
    _one_line(polyloop("serve", "--dir", str(tmp_path), "--users", str(tmp_path / "none.txt"), "--port", "0"),
              "cannot read the users file")


def test_add_user_needs_a_users_file_and_a_new_one_word_name(tmp_path: Path) -> None:
    _one_line(polyloop("serve", "--add-user", "ann"), "--add-user needs --users FILE")
    users = tmp_path / "operators.txt"
    add_user(users, "ann", "decide")
    _one_line(polyloop("serve", "--users", str(users), "--add-user", "ann"), "already names 'ann'")
    _one_line(polyloop("serve", "--users", str(users), "--add-user", "a b"), "one word")
    assert len(users.read_text().splitlines()) == 1


def test_sigterm_stops_the_console_with_0_and_ctrl_c_with_130(tmp_path: Path) -> None:
    import signal
    import time

    from console_helpers import Server

    for signum, code in ((signal.SIGTERM, 0), (signal.SIGINT, 130)):
        runs = tmp_path / f"runs-{signum}"
        runs.mkdir()
        server = Server(runs).start()
        assert server.proc is not None
        server.proc.send_signal(signum)
        assert server.proc.wait(timeout=30) == code, server.lines
        deadline = time.monotonic() + 10  # the reading thread takes the last lines off the pipe
        while "polyloop console stopped" not in "".join(server.lines) and time.monotonic() < deadline:
            time.sleep(0.01)
        server.stop()
        assert "polyloop console stopped" in "".join(server.lines)
        assert "Traceback" not in "".join(server.lines)
