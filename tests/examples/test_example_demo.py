"""examples/demo.py: runs offline, is deterministic, and the crash walkthrough works as written."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import pytest

from polyloop import JsonlStore, ToolContext, load_target
from polyloop.testing import logical

from example_helpers import EXAMPLES, Runner

GOAL = "write up the notes"


def _records(workdir: Path, run_id: str) -> list[dict[str, Any]]:
    lines = (workdir / "runs" / f"{run_id}.jsonl").read_bytes().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _intents(records: list[dict[str, Any]]) -> list[str]:
    return [r["result_id"] for r in records if r["record"] == "intent"]


def test_python_examples_demo_runs_offline_in_well_under_two_seconds(python: Runner, workdir: Path) -> None:
    started = time.monotonic()
    done = python("demo.py", "--run-id", "first")
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert "finished (final_answer) after 5 steps" in done.stdout
    assert "polyloop inspect first" in done.stdout
    assert "POLYLOOP_DEMO_CRASH=1 polyloop run examples/demo.py:agent" in done.stdout
    assert "step 2: write_file notes.txt" in done.stderr
    space = workdir / "demo-workspace" / "first"
    assert (space / "todo.txt").read_text().count("TODO") == 2
    assert _intents(_records(workdir, "first"))[-1] == "s5-m1"
    assert elapsed < 10  # in practice a fraction of a second; generous for loaded CI machines


@pytest.mark.asyncio
async def test_the_demo_is_deterministic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POLYLOOP_DEMO_DIR", str(tmp_path / "space"))
    agent = load_target(f"{EXAMPLES / 'demo.py'}:agent")
    store = JsonlStore(tmp_path / "runs")
    logs = []
    for run_id in ("one", "two"):
        result = await agent.run(GOAL, run_id=run_id, store=store)
        assert result.reason == "final_answer"
        entries = logical(list(await store.read_log(run_id)))
        for entry in entries:
            entry.pop("run_id", None)
            entry.pop("idempotency_key", None)
        logs.append(entries)
    assert logs[0] == logs[1]
    assert (tmp_path / "space" / "one" / "notes.txt").read_bytes() == (tmp_path / "space" / "two" / "notes.txt").read_bytes()


def test_the_crash_walkthrough_exactly_as_the_readme_tells_it(polyloop: Runner, workdir: Path) -> None:
    started = time.monotonic()

    # 1. Run with the crash switch: the process kills itself right after write_file's side effect.
    crashed = polyloop("run", "examples/demo.py:agent", "--run-id", "demo", "--goal", GOAL, env={"POLYLOOP_DEMO_CRASH": "1"})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    assert "SIGKILL" in crashed.stderr
    notes = workdir / "demo-workspace" / "demo" / "notes.txt"
    assert notes.read_text().startswith("Meeting notes")  # the side effect happened...
    records = _records(workdir, "demo")
    assert _intents(records)[-1] == "s2-a1"  # ...after its intent, with no result recorded
    assert not any(r["record"] == "step_completed" and r["step"] == 2 for r in records)

    # 2. inspect shows the unknown `never` action and the exact command to settle it.
    shown = polyloop("inspect", "demo")
    assert shown.returncode == 0, shown.stderr
    assert "needs_operator" in shown.stdout and "unknown" in shown.stdout and "never" in shown.stdout
    assert "polyloop mark-resolved demo s2-a1 --executed" in shown.stdout
    doc = json.loads(polyloop("inspect", "demo", "--json").stdout)
    assert doc["status"] == "needs_operator"
    assert [(e["id"], e["state"], e["replay"]) for e in doc["executions"] if e["kind"] == "action"] == [
        ("s1-a1", "done", "safe"),
        ("s2-a1", "unknown", "never"),
    ]

    # Resuming before an operator decides is refused (exit 3), and nothing runs.
    refused = polyloop("resume", "demo")
    assert refused.returncode == 3, refused.stderr
    assert "mark-resolved" in refused.stderr + refused.stdout

    # 3. The operator checks the scratch directory (notes.txt is there) and says so.
    settled = polyloop(
        "mark-resolved", "demo", "s2-a1", "--executed",
        "--observation", "wrote 188 bytes to notes.txt", "--reason", "notes.txt is there",
    )
    assert settled.returncode == 0, settled.stderr

    # 4. resume finishes the run without writing notes.txt again.
    before = notes.stat().st_mtime_ns
    resumed = polyloop("resume", "demo")
    assert resumed.returncode == 0, resumed.stderr
    assert "Wrote notes.txt and collected its 2 TODOs in todo.txt." in resumed.stdout
    assert notes.stat().st_mtime_ns == before
    assert "write_file notes.txt" not in resumed.stderr  # only steps 3 and 4 ran a tool
    assert (workdir / "demo-workspace" / "demo" / "todo.txt").exists()
    records = _records(workdir, "demo")
    assert [r["result_id"] for r in records if r["record"] == "intent" and r["kind"] == "action"] == [
        "s1-a1", "s2-a1", "s3-a1", "s4-a1",
    ]
    assert records[-1]["record"] == "run_finished"

    # 5. verify: the log is sound.
    verified = polyloop("verify", "runs/")
    assert verified.returncode == 0, verified.stderr
    assert "1 ok" in verified.stdout + verified.stderr

    assert time.monotonic() - started < 60  # "under two minutes", with a lot of room for slow CI


def test_not_executed_runs_the_action_again_with_the_same_key(polyloop: Runner, workdir: Path) -> None:
    crashed = polyloop("run", "examples/demo.py:agent", "--run-id", "d", "--goal", GOAL, env={"POLYLOOP_DEMO_CRASH": "write_file"})
    assert crashed.returncode == -signal.SIGKILL
    (workdir / "demo-workspace" / "d" / "notes.txt").unlink()  # say the write was lost after all
    assert polyloop("mark-resolved", "d", "s2-a1", "--not-executed", "--reason", "no notes.txt").returncode == 0
    resumed = polyloop("resume", "d", env={"POLYLOOP_DEMO_CRASH": "1"})  # the switch fires once per run
    assert resumed.returncode == 0, resumed.stderr
    actions = [r for r in _records(workdir, "d") if r["record"] == "intent" and r["kind"] == "action" and r["step"] == 2]
    assert [a["result_id"] for a in actions] == ["s2-a1", "s2-a2"]
    assert actions[0]["idempotency_key"] == actions[1]["idempotency_key"]
    assert (workdir / "demo-workspace" / "d" / "notes.txt").exists()


def test_the_switch_can_kill_the_shell_command_instead(polyloop: Runner, workdir: Path) -> None:
    crashed = polyloop("run", "examples/demo.py:agent", "--run-id", "sh", "--goal", GOAL, env={"POLYLOOP_DEMO_CRASH": "run_shell"})
    assert crashed.returncode == -signal.SIGKILL
    doc = json.loads(polyloop("inspect", "sh", "--json").stdout)
    unknown = [e for e in doc["executions"] if e["state"] == "unknown"]
    assert [(e["id"], e["tool"]) for e in unknown] == [("s4-a1", "run_shell")]
    assert (workdir / "demo-workspace" / "sh" / "todo.txt").exists()


@pytest.fixture
def demo(load_example: Callable[[str], ModuleType], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("POLYLOOP_DEMO_DIR", str(tmp_path))
    return load_example("demo")


@pytest.mark.parametrize("path", ["../escape.txt", "/etc/passwd", "sub/../../x"])
def test_tools_stay_inside_the_workspace(demo: ModuleType, path: str) -> None:
    ctx = ToolContext(run_id="r", step=1, attempt=1, result_id="s1-a1", idempotency_key="k")
    with pytest.raises(ValueError, match="outside the workspace"):
        demo.read_file(path, ctx)
    with pytest.raises(ValueError, match="outside the workspace"):
        demo.write_file(path, "x", ctx)


def test_replay_declarations(demo: ModuleType) -> None:
    assert {t.name: t.replay for t in demo.agent.tools} == {
        "list_files": "safe",
        "read_file": "safe",
        "write_file": "never",
        "run_shell": "never",
    }
