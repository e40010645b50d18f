"""The nemesis's short CI mode (benchmarks/nemesis.py --ci): 200 runs on 4+ workers under 120 random faults.

A real throwaway PostgreSQL, real processes, real SIGKILL/SIGSTOP, `pg_ctl restart -m immediate`,
a TCP proxy per worker and, as root, a worker in a network namespace whose link goes down. Slow:
about 40 s. The seed is printed; a failure replays with `python benchmarks/nemesis.py --seed N --ci`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import forking

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_nemesis_finds_no_violation():
    pytest.importorskip("pgserver") if os.environ.get("CI") != "true" else None
    done = forking.run([sys.executable, str(ROOT / "benchmarks" / "nemesis.py"), "--ci"], capture_output=True,
                          text=True, timeout=600, cwd=ROOT / "benchmarks")
    print(done.stdout)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "| duplicate `never` effects | 0 |" in done.stdout
    assert "| checker violations | 0 |" in done.stdout
