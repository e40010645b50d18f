"""`polyloop demo` and the demo target from this environment: quick checks beside the wheel's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from polyloop import TargetError, load_target

POLYLOOP = str(Path(sys.executable).parent / "polyloop")


def _polyloop(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POLYLOOP_")}
    return subprocess.run([POLYLOOP, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def test_polyloop_demo_runs_with_its_defaults_and_again_under_a_new_id(tmp_path: Path) -> None:
    for _ in range(2):
        done = _polyloop(tmp_path, "demo")
        assert done.returncode == 0, done.stderr
        assert "finished: final answer after 5 steps" in done.stdout
    logs = sorted((tmp_path / "runs").glob("*.jsonl"))
    assert len(logs) == 2
    started = json.loads(logs[0].read_text().splitlines()[0])
    assert (started["goal"], started["target"]) == ("write up the notes", "polyloop.examples.demo:agent")


def test_polyloop_demo_takes_dir_and_says_so_in_the_next_command(tmp_path: Path) -> None:
    done = _polyloop(tmp_path, "demo", "--run-id", "d1", "--dir", "elsewhere", "--goal", "notes please")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "elsewhere" / "d1.jsonl").exists()
    assert f"POLYLOOP_DEMO_CRASH=1 polyloop demo --dir {tmp_path / 'elsewhere'}" in done.stderr
    again = _polyloop(tmp_path, "demo", "--run-id", "d1", "--dir", "elsewhere")
    assert again.returncode == 2 and "polyloop resume d1" in again.stderr


def test_polyloop_demo_help_says_what_it_runs(tmp_path: Path) -> None:
    done = _polyloop(tmp_path, "demo", "--help")
    assert done.returncode == 0
    assert "polyloop.examples.demo:agent" in done.stdout and "POLYLOOP_DEMO_CRASH" in done.stdout
    listing = _polyloop(tmp_path, "--help").stdout
    assert "demo" in listing.split("Commands:")[1]


def test_a_missing_examples_demo_py_points_at_the_shipped_demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TargetError, match=r"no file examples/demo.py \(the demo ships with PolyLoop: run "
                                          r"`polyloop demo`, or use the target polyloop.examples.demo:agent"):
        load_target("examples/demo.py:agent")
    with pytest.raises(TargetError) as other:
        load_target("examples/other.py:agent")
    assert "polyloop demo" not in str(other.value)


def test_the_shipped_target_loads_the_same_agent_as_the_repository_script() -> None:
    script = Path(__file__).resolve().parents[2] / "examples" / "demo.py"
    assert load_target("polyloop.examples.demo:agent") is load_target(f"{script}:agent")
