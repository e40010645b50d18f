"""Helpers for driving the real `polyloop` console script in subprocesses."""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from polyloop._log.ids import idempotency_key
from support.cli import Done, clean_env, console_script, polyloop, polyloop_quick  # noqa: F401 (re-exported)

HERE = Path(__file__).resolve().parent
AGENTS = HERE / "agents.py"


@dataclass
class Cli:
    """Runs `polyloop` in `cwd` against the run directory `runs`."""

    cwd: Path
    runs: Path

    def __call__(self, *args: str, env: dict[str, str] | None = None, timeout: float = 60, dir: bool = True,
                 process: bool = False) -> Done:
        """`polyloop ARGS...`; `process=True` runs even a reading command as its own process."""
        argv = [*args]
        if dir and args and args[0] in {"run", "resume", "inspect", "mark-resolved"}:
            argv += ["--dir", str(self.runs)]
        run = polyloop if process else polyloop_quick
        return run(*argv, cwd=self.cwd, env=clean_env(**(env or {})), timeout=timeout)

    def log(self, run_id: str) -> Path:
        return self.runs / f"{run_id}.jsonl"

    def records(self, run_id: str) -> list[dict[str, Any]]:
        lines = self.log(run_id).read_bytes().splitlines()
        return [json.loads(line) for line in lines if line.strip()]


def renamed(log: bytes, old: str, new: str) -> bytes:
    """The bytes of run `old`'s log as run `new` would have written them: its run id and the
    idempotency keys derived from it replaced (a key that names another run is corrupt, rule 36)."""
    keys: dict[str, str] = {}
    for line in log.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a torn tail or garbage: nothing to re-derive
        key = rec.get("idempotency_key") if isinstance(rec, dict) else None
        if key and not key.endswith("-rollback") and key not in keys:
            keys[key] = idempotency_key(new, rec["step"], rec["tool"], rec["args"], rec.get("call"))
    out = log.replace(f'"run_id":"{old}"'.encode(), f'"run_id":"{new}"'.encode())
    for before, after in keys.items():
        out = out.replace(before.encode(), after.encode())
    return out


def target(name: str) -> str:
    return f"{AGENTS}:{name}"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree_digest(root: Path) -> dict[str, str]:
    """Every file under `root` (lock files included) with its hash."""
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): digest(p) for p in sorted(root.rglob("*")) if p.is_file()}


def logs_digest(root: Path) -> dict[str, str]:
    """Like `tree_digest`, but a run's lock file counts only as present.

    A command that takes a run's hold and is then refused leaves every log
    as it was; the lock file beside it names its holder while the hold
    lasts (and is created for a log that had none).
    """
    return {name: ("lock" if name.endswith(".lock") else h) for name, h in tree_digest(root).items()}


def one_line_error(done: Done) -> str:
    """Assert stderr is exactly one clear line (no traceback) and return it."""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


def effects(tmp_path: Path) -> int:
    where = tmp_path / "effects"
    return len(list(where.iterdir())) if where.exists() else 0


def start_slow(cli: Cli, run_id: str, marker: Path) -> subprocess.Popen[str]:
    """A run held by a live process, inside a tool that sleeps for a minute (`agents.py:slow`)."""
    proc = subprocess.Popen(
        [*console_script(), "run", target("slow"), "--goal", "g", "--run-id", run_id, "--dir", str(cli.runs)],
        cwd=cli.cwd,
        env=clean_env(POLYLOOP_TEST_STARTED=str(marker)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    deadline = time.monotonic() + 30
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the slow tool never started"
        time.sleep(0.05)
    return proc
