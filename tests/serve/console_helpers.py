"""Helpers of the console's browser tests: a real `polyloop serve` process, runs to decide, Chromium."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from polyloop import JsonlStore, NeedsOperatorError, inspect_run, resume_run, run_target
from support.cli import clean_env, console_script
from support import forking

HERE = Path(__file__).resolve().parent
TARGET = f"{HERE / 'console_agents.py'}:agent"
T = TypeVar("T")


def chromium() -> str:
    """Debian's Chromium; skipped (with why) when absent, except under CI=true where it must be there."""
    found = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
    if found is None:
        why = "Debian's chromium is not installed (apt-get install -y chromium): the console's browser tests need it"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    return found


def off_thread(fn: Callable[[], T]) -> T:
    """`fn()` in another thread: asyncio.run beside Playwright's sync API, which holds this thread's loop."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(fn).result(timeout=60)


def start_run(runs: Path, run_id: str, tool: str, args: dict[str, Any], inputs: dict[str, Any] | None = None) -> None:
    """Start a run of the console agent that stops waiting for a person (exit code 3 on the command line)."""
    goal = json.dumps({"tool": tool, "args": args})

    async def go() -> None:
        try:
            await run_target(TARGET, goal=goal, store=JsonlStore(runs), run_id=run_id, inputs=inputs)
        except NeedsOperatorError:
            return
        raise AssertionError(f"run {run_id} did not stop for a person")

    off_thread(lambda: asyncio.run(go()))


def resume(runs: Path, run_id: str) -> Any:
    """`polyloop resume` in this process: the run carries on after the decision (paying into the runs' ledger)."""
    before = os.environ.get("CONSOLE_LEDGER")
    os.environ["CONSOLE_LEDGER"] = str(runs.parent / "ledger.txt")
    try:
        return off_thread(lambda: asyncio.run(resume_run(run_id, store=JsonlStore(runs))))
    finally:
        if before is None:
            del os.environ["CONSOLE_LEDGER"]
        else:
            os.environ["CONSOLE_LEDGER"] = before


def report(runs: Path, run_id: str) -> dict[str, Any]:
    """`polyloop inspect --json` of the run."""
    return off_thread(lambda: asyncio.run(inspect_run(JsonlStore(runs), run_id))).to_json()


@dataclass
class Server:
    """A `polyloop serve` process on a free port."""

    runs: Path
    extra: tuple[str, ...] = ()
    proc: subprocess.Popen[str] | None = None
    lines: list[str] = field(default_factory=list)
    base: str = ""
    token_url: str = ""

    def start(self) -> Server:
        self.proc = subprocess.Popen(
            # From the runs' parent as `--dir runs`: the commands the pages print name no directory.
            [*console_script(), "serve", *(() if "--store" in self.extra else ("--dir", self.runs.name)),
             "--port", "0", *self.extra], cwd=self.runs.parent,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=clean_env(CONSOLE_LEDGER=str(
                self.runs.parent / "ledger.txt")), stdin=subprocess.DEVNULL)
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 30
        while not self.base:
            line = self.proc.stdout.readline()
            assert line, f"polyloop serve ended: {self.lines}"
            self.lines.append(line)
            found = re.search(r"on (http://\S+/)", line)
            if found:
                self.base = found.group(1)
            assert time.monotonic() < deadline
        if "--users" not in self.extra:
            line = self.proc.stdout.readline()
            self.lines.append(line)
            self.token_url = re.search(r"(http://\S+\?token=\S+)", line).group(1)  # type: ignore[union-attr]
        threading.Thread(target=self._drain, daemon=True).start()
        self._wait_listening()
        return self

    def _drain(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def _wait_listening(self) -> None:
        host, port = re.match(r"http://([^:/]+):(\d+)/", self.base).groups()  # type: ignore[union-attr]
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
                return
            except OSError:
                assert time.monotonic() < deadline, "polyloop serve never listened"
                time.sleep(0.05)

    @property
    def port(self) -> int:
        return int(self.base.rstrip("/").rsplit(":", 1)[1])

    def kill(self) -> None:
        """SIGKILL: no shutdown of any kind."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self._close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._close()

    def _close(self) -> None:
        if self.proc is not None and self.proc.stdout is not None:
            try:
                self.proc.stdout.close()
            except (OSError, ValueError):
                pass


def crash_run(runs: Path, run_id: str, to: str) -> None:
    """`polyloop run` of the console agent sending to `to`, SIGKILLed right after the send: an unknown action."""
    goal = json.dumps({"tool": "send", "args": {"to": to, "text": "hello"}})
    proc = forking.run([*console_script(), "run", TARGET, "--run-id", run_id, "--goal", goal, "--dir", str(runs)],
                          env=clean_env(CONSOLE_CRASH="1", CONSOLE_LEDGER=str(runs.parent / "ledger.txt")),
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == -signal.SIGKILL, proc
