"""benchmarks/batch.py still runs against the library as it is (its figures are never judged here)."""

from __future__ import annotations

import subprocess
import sys
from support import ROOT
from support import forking

SCRIPT = ROOT / "benchmarks" / "batch.py"


def test_the_batch_benchmark_runs_and_prints_its_ratios(tmp_path):
    done = forking.run([sys.executable, str(SCRIPT), "--quick", "--dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| batch -P 2 |" in done.stdout
    assert "batch -P 2 / batch -P 1:" in done.stdout
