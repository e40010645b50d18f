"""The benchmarks run (`python benchmarks/run.py --quick`) and print their table.

These check that every benchmark still runs against the library as it is,
never the figures: the machine is shared, and timing assertions would flake.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from support import forking

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "benchmarks" / "run.py"
PEERS_PYTHON = ROOT / ".venv-peers" / "bin" / "python"


def _run(*args: str, tmp_path: Path) -> str:
    proc = forking.run(
        [sys.executable, str(RUN), "--quick", "--dir", str(tmp_path), *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
        env={**os.environ, "POLYLOOP_PEERS_PYTHON": ""},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def _bench(script: str, tmp_path: Path) -> str:
    """Run one benchmark script of benchmarks/ at its --quick size; its output."""
    proc = forking.run(
        [sys.executable, str(ROOT / "benchmarks" / script), "--quick", "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=240, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow  # every benchmark, start to end: CI's second command runs it
def test_quick_run_prints_every_figure_and_the_targets(tmp_path):
    # The peers are asked of this Python, which never has them: that figure
    # must skip with a clear message instead of failing.
    out = _run("--peers-python", sys.executable, tmp_path=tmp_path)
    for title in (
        "### 1. One step against the physical floor",
        "### 1b. Where a step's time goes",
        "### 2. Growth with history",
        "### 3. The peers on the same work",
        "### 4. Read side",
        "### 5. Many runs at once",
        "### 6. The loop's own CPU, resume against verify, and a long run's memory",
        "### Targets",
    ):
        assert title in out, out
    assert "Skipped: the peers are not installed" in out
    assert "| 10 |" in out  # a history-length row of figure 1
    assert "| 256, `MemoryStore` (no disk) |" in out  # figure 5's in-memory row, next to its JSONL level
    assert "in-memory step, plain `def` tool" in out and "`resume` of a" in out, out
    assert "not judged (--quick)" in out
    assert list(tmp_path.iterdir()) == []  # the benchmark cleans up after itself


@pytest.mark.slow
@pytest.mark.skipif(not PEERS_PYTHON.exists(), reason="no .venv-peers (see docs/performance.md)")
def test_quick_peers_run_when_installed(tmp_path):
    out = _run("--only", "peers", "--peers-python", str(PEERS_PYTHON), tmp_path=tmp_path)
    assert "LangGraph (SqliteSaver, sync)" in out and "DBOS (SQLite)" in out, out


def test_the_ls_benchmark_runs_and_cleans_up(tmp_path):
    out = _bench("ls.py", tmp_path)
    assert "`list_runs`, 1 worker" in out and "Speed-up of" in out, out
    assert list(tmp_path.iterdir()) == []


def test_the_parallel_calls_benchmark_counts_the_same_fsyncs_for_four_calls_as_for_one(tmp_path):
    out = _bench("calls.py", tmp_path)
    rows = {line.split("|")[1].strip(): line.split("|") for line in out.splitlines() if line.startswith("| ")}
    one, four = rows["1 call per step"], rows["4 calls per step (intents in one durable write)"]
    # Counted, not timed: the four intents of a step are one durable write.
    assert float(four[4]) == float(one[4]), out
    assert float(rows["4 calls per step, one durable write per intent (for scale)"][4]) > float(one[4])
    assert list(tmp_path.iterdir()) == []


def test_the_durability_benchmark_runs_both_stores_side_by_side(tmp_path):
    out = _bench("durability.py", tmp_path)
    assert "| in memory (the loop's own CPU) |" in out and "JSONL / in memory:" in out, out
    assert "JSONL with disk threads / in memory:" in out, out
    assert list(tmp_path.iterdir()) == []


def test_the_jsonl_cpu_benchmark_prints_every_variant_and_way_and_leaves_the_store_as_shipped(tmp_path):
    out = _bench("jsonlcpu.py", tmp_path)
    rows = {line.split(" | ")[0].lstrip("| ") for line in out.splitlines() if line.startswith("| ")}
    assert {"in memory", "JSONL as shipped", "JSONL, no look for a request to stop",
            "JSONL, no check that the log is still its path", "JSONL, no fsync", "JSONL, none of the three",
            "the store's batch to the kernel (Syncer)", "a thread of the default executor",
            "on the event loop (forbidden: for scale)", "no fsync, one asyncio.sleep(0)"} <= rows, out
    assert list(tmp_path.iterdir()) == []


def test_the_hosted_model_benchmark_prints_both_ways_side_by_side(tmp_path):
    proc = forking.run([sys.executable, str(ROOT / "benchmarks" / "hosted.py"), "--quick"], capture_output=True,
                       text=True, timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {line.split("|")[1].strip(): line.split("|") for line in proc.stdout.splitlines() if line.startswith("| ")}
    assert rows["a TLS context built per call (the SDK's default)"][3].strip() == "1.00x", proc.stdout
    assert rows["the process's one TLS context (shipped)"][3].strip().endswith("x"), proc.stdout


@pytest.mark.slow  # two short runs of two trees under valgrind: ~1 minute
def test_the_instruction_count_is_the_same_for_the_same_tree_and_given_per_step(tmp_path):
    # Deterministic by design (valgrind, PYTHONHASHSEED=0): the same tree twice counts the same.
    if shutil.which("valgrind") is None and os.environ.get("CI") != "true":  # .ci/run installs it
        pytest.skip("valgrind is not installed (apt-get install valgrind)")
    proc = forking.run([sys.executable, str(ROOT / "benchmarks" / "instructions.py"), str(ROOT), str(ROOT),
                        "--steps", "20", "60"], capture_output=True, text=True, timeout=400, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert len(lines) == 2, proc.stdout
    counts = [float(line.split()[0].replace(",", "")) for line in lines]
    assert counts[0] > 10_000 and abs(counts[1] / counts[0] - 1) < 0.01, proc.stdout
    assert all("instructions a step" in line for line in lines), proc.stdout
