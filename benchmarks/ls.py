"""`polyloop ls` on a directory of many small logs: one core against all of them.

    python benchmarks/ls.py                  # 10,000 logs of 5 steps, 5 interleaved repetitions
    python benchmarks/ls.py --quick          # 200 logs, 3 repetitions: checks that it runs
    python benchmarks/ls.py --logs 20000 --dir /mnt/other-fs

Times `list_runs` (what `polyloop ls` runs) with `workers=1` and with one
worker per core, side by side and interleaved, and `verify_logs` on the same
directory with all cores as a reference for the cost of reading and checking
the same bytes. One log in four is cut short before its end, so the
directory holds finished and resumable runs. Prints a Markdown table of
medians and their ratios; the absolute times are for orientation only.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._common import median, ratio  # noqa: E402
from benchmarks.readside import write_log  # noqa: E402


def make_directory(where: str, logs: int, steps: int) -> dict[str, int]:
    """`logs` logs in `where`: three in four finished, one in four cut short (resumable)."""
    os.makedirs(where)
    expected = {"finished": 0, "resumable": 0}
    for i in range(logs):
        path = os.path.join(where, f"run-{i:05d}.jsonl")
        write_log(path, f"run-{i:05d}", steps)
        if i % 4 == 3:
            lines = Path(path).read_bytes().splitlines(keepends=True)
            Path(path).write_bytes(b"".join(lines[:-3]))  # stopped before its final answer
            expected["resumable"] += 1
        else:
            expected["finished"] += 1
    return expected


def interleaved(fns: dict[str, object], reps: int) -> dict[str, float]:
    times: dict[str, list[float]] = {k: [] for k in fns}
    for rep in range(reps):
        for key in fns if rep % 2 == 0 else reversed(list(fns)):
            gc.collect()
            start = time.perf_counter()
            fns[key]()  # type: ignore[operator]
            times[key].append(time.perf_counter() - start)
    return {k: median(v) for k, v in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logs", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="200 logs, 3 repetitions")
    parser.add_argument("--dir", default=None, help="where to write the logs (default: a temporary directory)")
    args = parser.parse_args(argv)
    logs, reps = (200, 3) if args.quick else (args.logs, args.reps)

    from polyloop import list_runs, verify_logs

    cores = os.cpu_count() or 1
    top = tempfile.mkdtemp(prefix="polyloop-ls-bench-", dir=args.dir)
    try:
        many = os.path.join(top, "runs")
        expected = make_directory(many, logs, args.steps)

        def ls(workers: int) -> None:
            runs = list_runs(many, workers=workers)
            counts = {s: sum(r.status == s for r in runs) for s in expected}
            assert counts == expected and len(runs) == logs, counts

        def verify() -> None:
            assert not verify_logs(many, workers=cores).failed()

        t = interleaved({"one": lambda: ls(1), "all": lambda: ls(cores), "verify": verify}, reps)
    finally:
        shutil.rmtree(top, ignore_errors=True)

    print(f"### `polyloop ls` on {logs:,} logs of {args.steps} steps\n")
    print("| work | median | per log | ratio |")
    print("|---|---:|---:|---:|")
    print(f"| `list_runs`, 1 worker | {t['one'] * 1e3:,.0f} ms | {t['one'] / logs * 1e6:,.0f} µs | 1.00× |")
    print(
        f"| `list_runs`, {cores} workers (one per core) | {t['all'] * 1e3:,.0f} ms "
        f"| {t['all'] / logs * 1e6:,.0f} µs | {ratio(t['all'] / t['one'])} |"
    )
    print(
        f"| `verify_logs`, {cores} workers, same directory | {t['verify'] * 1e3:,.0f} ms "
        f"| {t['verify'] / logs * 1e6:,.0f} µs | {ratio(t['verify'] / t['one'])} |"
    )
    print(
        f"\nMedians of {reps} interleaved repetitions; the files were just written, so they are read "
        f"from the page cache. Speed-up of {cores} cores over 1: {t['one'] / t['all']:.2f}×; "
        f"ls costs {t['all'] / t['verify']:.2f}× what verify costs on the same directory and cores."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
