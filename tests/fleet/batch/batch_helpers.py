"""Helpers of the batch tests: the real `polyloop batch` in a subprocess, settling, and the oracle."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from polyloop import JsonlStore, inspect_run, mark_resolved, verify_logs
from support import forking
from support.cli import LEAKY, Done, clean_env  # noqa: F401 (Done re-exported to the batch tests)
from support.cli import console_script as polyloop

HERE = Path(__file__).resolve().parent
AGENTS = HERE / "agents.py"


def target(name: str) -> str:
    return f"{AGENTS}:{name}"


def env(**extra: str) -> dict[str, str]:
    return clean_env(leaky=(*LEAKY, "BATCH_"), **extra)


@dataclass
class World:
    """A directory with a goals file, a run directory and the world's effects file."""

    root: Path

    @property
    def runs(self) -> Path:
        return self.root / "runs"

    @property
    def effects_path(self) -> Path:
        return self.root / "effects.ndjson"

    def env(self, **extra: str) -> dict[str, str]:
        return env(BATCH_EFFECTS=str(self.effects_path), **extra)

    def goals(self, lines: list[str], name: str = "goals.txt") -> Path:
        path = self.root / name
        path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
        return path

    def argv(self, agent: str, goals: Path, *args: str) -> list[str]:
        # One worker unless a test asks for more: each worker costs an interpreter's start.
        workers = () if "--processes" in args else ("--processes", "1")
        return [*polyloop(), "batch", target(agent), str(goals), "--dir", str(self.runs), *workers, *args]

    def batch(self, agent: str, goals: Path, *args: str, timeout: float = 120, **extra: str) -> Done:
        # A real `polyloop batch` process, forked from the test zygote (no Python start, no CLI imports);
        # its workers are started by the batch itself, as a user's are.
        proc = forking.run(
            self.argv(agent, goals, *args), cwd=self.root, env=self.env(**extra),
            capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        )
        return Done(proc.returncode, proc.stdout, proc.stderr)

    def spawn(self, agent: str, goals: Path, *args: str, **extra: str) -> subprocess.Popen[str] | forking.Forked:
        """`polyloop batch` running in its own session (`kill_group` reaches it and its workers), forked when it can be."""
        argv = self.argv(agent, goals, *args)
        how: dict[str, Any] = dict(cwd=self.root, env=self.env(**extra), stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                                   start_new_session=True)
        return forking.popen(argv, **how)

    def effects(self) -> list[dict[str, Any]]:
        if not self.effects_path.exists():
            return []
        return [json.loads(line) for line in self.effects_path.read_text().splitlines() if line.strip()]

    def settle(self) -> int:
        """Settle every unknown `never` action by the effects file (the world's truth, not the log)."""
        happened = {(e["run_id"], e["result_id"]) for e in self.effects()}
        store = JsonlStore(self.runs)
        settled = 0

        async def go() -> None:
            nonlocal settled
            for log in sorted(self.runs.glob("*.jsonl")):
                report = await inspect_run(store, log.stem)
                if report.status != "needs_operator":
                    continue
                assert report.recovery is not None
                for e in report.recovery.blocking:
                    executed = (log.stem, e.result_id) in happened
                    await mark_resolved(
                        store, log.stem, e.result_id, executed=executed,
                        observation=f"stamped {e.args['label']}" if executed else None,
                        reason="checked the effects file", by="test",
                    )
                    settled += 1

        asyncio.run(go())
        return settled


def check_oracle(world: World, doc: dict[str, Any], run_ids: list[str]) -> None:
    """Every line finished, listed once; every `never` action of every run happened once, not twice, not lost; logs verify."""
    entries = doc["runs"]
    assert [e["run_id"] for e in entries] == run_ids, entries
    assert {e["status"] for e in entries} == {"finished"}, [e for e in entries if e["status"] != "finished"]
    assert doc["outcome"] == "finished"
    assert doc["summary"]["finished"] == len(run_ids)
    per_action = Counter((e["run_id"], e["step"]) for e in world.effects())
    twice = {k: n for k, n in per_action.items() if n > 1}
    assert not twice, f"never actions executed twice: {twice}"
    expected = {(rid, step) for rid in run_ids for step in (2, 3)}
    assert set(per_action) == expected, f"lost: {sorted(expected - set(per_action))}"
    report = verify_logs(world.runs, workers=1)
    assert not report.failed(), report.to_json()


def kill_group(proc: subprocess.Popen[str] | forking.Forked, sig: int = signal.SIGKILL) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
