"""`polyloop batch` on a terminal: the live display on stderr, and untrusted text made inert."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import time

from batch_helpers import World


def _on_a_terminal(world: World, argv: list[str], **extra: str) -> tuple[subprocess.Popen[bytes], int]:
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        argv, cwd=world.root, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL,
        env=world.env(**extra), start_new_session=True,
    )
    os.close(slave)
    return proc, master


def _read_all(master: int, proc: subprocess.Popen[bytes], timeout: float = 60) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        elif proc.poll() is not None:
            break
    return seen


def _twelve_quick_runs(world: World, *args: str, columns: int) -> tuple[int, bytes, bytes]:
    """The exit code, what the terminal (stderr) showed and stdout of a batch of 12 short runs."""
    goals = world.goals([f"goal {n}" for n in range(12)])
    proc, master = _on_a_terminal(world, world.argv("quick", goals, *args), BATCH_SLOW="0.1", COLUMNS=str(columns))
    seen = _read_all(master, proc)
    out, _ = proc.communicate(timeout=60)
    os.close(master)
    return proc.returncode, seen, out


def test_a_live_display_counts_runs_by_status_with_steps_per_second_and_an_eta(tmp_path):
    code, seen, out = _twelve_quick_runs(World(tmp_path), "--processes", "2", "--concurrency", "2", columns=160)
    assert code == 0, seen
    assert b"batch" in seen and b"steps/s" in seen and b"ETA" in seen and b"finished" in seen, seen
    assert b"done: every run finished" in out


def test_hostile_text_from_a_run_is_shown_inert(tmp_path):
    world = World(tmp_path)
    goals = world.goals(["g"])
    done = world.batch("hostile", goals, COLUMNS="400")
    assert done.code == 1
    assert "server said" in done.stdout
    for raw in ("\x1b", "\u202e", "\x07", "\x9b", "\r"):
        assert raw not in done.stdout + done.stderr
    assert "\\x1b[31mred" in done.stdout and "[/x]" in done.stdout


def test_an_80_column_terminal_keeps_the_bar_the_count_and_the_pace(tmp_path):
    code, seen, _ = _twelve_quick_runs(World(tmp_path), "--processes", "1", "--concurrency", "2", columns=80)
    assert code == 0, seen
    frames = [f for f in seen.replace(b"\r", b"\n").split(b"\n") if b"steps/s" in f]
    assert frames, seen
    # The count of settled lines and the pace survive; the words are shortened, not the numbers.
    assert any(b"/12" in f and b"steps/s, ETA" in f and b"done" in f for f in frames), frames
    assert not any(b"b\xe2\x80\xa6" in f for f in frames), frames  # "b…": the label itself was cut
