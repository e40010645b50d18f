"""`polyloop verify` on a terminal: a progress bar on stderr, and Ctrl-C that really stops it."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import time
from pathlib import Path

from cli_helpers import clean_env, console_script, renamed, target


def _many_logs(cli, tmp_path: Path, count: int) -> Path:
    cli("run", target("finishing"), "--goal", "g", "--run-id", "seed")
    seed = cli.log("seed").read_bytes()
    many = tmp_path / "many"
    many.mkdir()
    for i in range(count):
        (many / f"r{i}.jsonl").write_bytes(renamed(seed, "seed", f"r{i}"))
    return many


def _start_on_a_terminal(*args: str) -> tuple[subprocess.Popen[bytes], int]:
    """Run polyloop with stderr on a pseudo-terminal; return the process and the terminal's reading end."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [*console_script(), *args],
        stdout=subprocess.PIPE,
        stderr=slave,
        stdin=subprocess.DEVNULL,
        env=clean_env(),
        start_new_session=True,  # its own process group, as a shell job has
    )
    os.close(slave)
    return proc, master


def _read_until(master: int, needle: bytes, timeout: float = 30) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout
    while needle not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.1)
        if ready:
            try:
                seen += os.read(master, 4096)
            except OSError:
                break
    return seen


def test_a_progress_bar_shows_on_a_terminal_but_not_in_json_mode(cli, tmp_path):
    many = _many_logs(cli, tmp_path, 80)
    proc, master = _start_on_a_terminal("verify", str(many), "--workers", "2")
    seen = _read_until(master, b"verifying")
    out, _ = proc.communicate(timeout=30)
    os.close(master)
    assert proc.returncode == 0
    assert b"verifying" in seen
    assert b"80 logs checked" in out

    proc, master = _start_on_a_terminal("verify", str(many), "--json")
    out, _ = proc.communicate(timeout=30)
    seen = _read_until(master, b"verifying", timeout=0.5)
    os.close(master)
    assert proc.returncode == 0 and b"verifying" not in seen
    assert out.startswith(b"{")


def test_ctrl_c_stops_verify_and_its_workers_with_130(cli, tmp_path):
    many = _many_logs(cli, tmp_path, 6000)
    proc, master = _start_on_a_terminal("verify", str(many), "--workers", "2")
    assert b"verifying" in _read_until(master, b"verifying")
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C reaches the whole foreground group
    try:
        proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise AssertionError("verify hung after Ctrl-C") from None
    rest = _read_until(master, b"interrupted", timeout=5)
    os.close(master)
    assert proc.returncode == 130
    assert b"interrupted" in rest and b"Traceback" not in rest
