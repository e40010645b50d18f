"""One MCP kill-point scenario's directory: the effect file, the cue, the child run and the `polyloop` CLI."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from support import forking

HERE = Path(__file__).resolve().parent
TRACEBACK = "Traceback (most recent call last)"


class Scenario:
    def __init__(self, root: Path, *, trust: bool = False, url: str | None = None) -> None:
        self.root = root
        self.runs = root / "runs"
        self.effects_file = root / "effects.jsonl"
        self.cue_file = root / "cue"
        self.pids_file = root / "pids"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("POLYLOOP_", "MCP_", "EFFECT_", "PYTEST_"))}
        env.update(POLYLOOP_DIR=str(self.runs), EFFECT_FILE=str(self.effects_file), EFFECT_CUE=str(self.cue_file),
                   EFFECT_PIDS=str(self.pids_file), MCP_TRUST="1" if trust else "0")
        if url:
            env["MCP_URL"] = url
        self.env = env

    def cue(self, what: str) -> None:
        self.cue_file.write_text(what)

    def effects(self, tool: str | None = None) -> list[dict[str, Any]]:
        if not self.effects_file.exists():
            return []
        found = [json.loads(line) for line in self.effects_file.read_text().splitlines() if line]
        return [e for e in found if tool is None or e["tool"] == tool]

    def pids(self) -> list[int]:
        return [int(p) for p in self.pids_file.read_text().split()] if self.pids_file.exists() else []

    def child(self, run_id: str, script: list[Any], kill_at: str = "none", **env: str) -> subprocess.CompletedProcess[str]:
        """The agent's run in its own process, on a store that SIGKILLs it at `kill_at`."""
        return forking.run(
            [sys.executable, str(HERE / "child.py"), str(self.runs), run_id, kill_at],
            env={**self.env, "MCP_SCRIPT": json.dumps(script), **env}, cwd=self.root,
            capture_output=True, text=True, timeout=120,
        )

    def polyloop(self, *args: str, script: list[Any] | None = None, **env: str) -> subprocess.CompletedProcess[str]:
        extra = {"MCP_SCRIPT": json.dumps(script)} if script is not None else {}
        proc = forking.run(
            [sys.executable, "-m", "polyloop", *args], env={**self.env, **extra, **env}, cwd=self.root,
            capture_output=True, text=True, timeout=120,
        )
        assert TRACEBACK not in proc.stderr, proc.stderr
        return proc

    def inspect(self, run_id: str) -> dict[str, Any]:
        proc = self.polyloop("inspect", run_id, "--json")
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class HttpServer:
    """The effect server over streamable HTTP, in its own process (started again on demand)."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.stop()  # a server killed by its cue is reaped before the next one starts
        env = dict(self.scenario.env)
        self.proc = subprocess.Popen([sys.executable, str(HERE / "effect_server.py"), "http", str(self.port)],
                                     env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError("the HTTP effect server exited at start")
                time.sleep(0.05)
        raise RuntimeError("the HTTP effect server did not listen")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait(10)
