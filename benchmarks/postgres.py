"""The PostgreSQL store's figures, measured side by side on one server.

    python benchmarks/postgres.py [--url URL] [--quick] [--lease SECONDS] [--appends]

1. A step's cost against the floor: the same agent as the other benchmarks
   (an instant model, one trivial `safe` tool, ~500-byte messages) run on a
   `PostgresStore`, against the bare floor of two committed single-row
   INSERTs of a 200-byte row on the same server (what a step's two durable
   intents cannot go below). Blocks of steps and blocks of floor pairs
   alternate; the median of the per-block ratios is reported, with the
   middle half of them (how much the shared machine moved it).
2. Steps per second with 1, 2 and 4 `polyloop worker` processes on this
   machine, each running 4 runs at once, on the same queued work.
3. Takeover latency: a worker is SIGKILLed while it holds a run; the time
   until another, idle worker announces the takeover, over many trials, as a
   ratio of the lease.

With `--appends`, only a breakdown of one append: the store's statement,
durable and not, against the floor's INSERT and the PL/pgSQL function
appends used before, in alternating blocks on one connection.

Absolute times are printed for orientation only: the machine is shared.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._common import FLOOR_RECORD, lookup_tool, scripted_outputs  # noqa: E402

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
THIS = str(Path(__file__).resolve())


def bench_agent() -> Any:
    """The workload of the other benchmarks; $PL_BENCH_STEPS steps, $PL_BENCH_HOLD seconds in step 1."""
    from polyloop import Agent, ScriptedModel, tool

    steps = int(os.environ.get("PL_BENCH_STEPS", "20"))
    hold = float(os.environ.get("PL_BENCH_HOLD", "0"))

    @tool(name="hold", replay="safe")
    async def hold_tool() -> str:
        """Hold the run (a long tool call), so a worker can be killed while it holds it."""
        await asyncio.sleep(hold)
        return "held"

    outputs = scripted_outputs(steps)
    if hold:
        outputs = [{"tool": "hold", "args": {}}, *outputs]
    # The takeover trials kill the holder of one run in the same step again and
    # again: on purpose, so the crash-loop stop (5 resumes without progress) is off.
    return Agent(model=ScriptedModel(outputs), tools=[lookup_tool(), hold_tool], max_steps=len(outputs) + 1,
                 max_resumes_without_progress=None if hold else 5)


# -- 1. step cost against the floor ------------------------------------------------


async def _floor_pairs(url: str, pairs: int) -> float:
    import psycopg

    body = FLOOR_RECORD.decode()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute("CREATE TABLE IF NOT EXISTS polyloop_bench_floor (id bigserial PRIMARY KEY, body text)")
        await conn.execute("SET synchronous_commit = on")
        start = time.perf_counter()
        for _ in range(2 * pairs):
            await conn.execute("INSERT INTO polyloop_bench_floor (body) VALUES (%s)", (body,), prepare=True)
        elapsed = time.perf_counter() - start
        await conn.execute("TRUNCATE polyloop_bench_floor")
    return elapsed / pairs


async def _steps(url: str, steps: int) -> float:
    from polyloop.stores import PostgresStore

    os.environ["PL_BENCH_STEPS"] = str(steps)
    async with PostgresStore(url) as store:
        await store.list_runs()  # connect and check the schema outside the timing
        agent = bench_agent()
        start = time.perf_counter()
        result = await agent.run("build every module", run_id=f"bench-{uuid.uuid4().hex[:12]}", store=store)
        elapsed = time.perf_counter() - start
    assert result.reason == "final_answer", result
    return elapsed / (steps + 1)


def step_cost(url: str, blocks: int, steps: int) -> dict[str, float]:
    ratios, step_times, floors = [], [], []
    for _ in range(blocks):
        floor = asyncio.run(_floor_pairs(url, steps))
        step = asyncio.run(_steps(url, steps))
        ratios.append(step / floor)
        step_times.append(step)
        floors.append(floor)
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    return {
        "ratio": statistics.median(ratios),
        "q1": quartiles[0],
        "q3": quartiles[2],
        "step_ms": statistics.median(step_times) * 1e3,
        "floor_ms": statistics.median(floors) * 1e3,
    }


# -- 1b. where an append's time goes (--appends) -------------------------------------


async def _statements(url: str, blocks: int, per_block: int) -> dict[str, float]:
    """Median seconds per statement of each kind (wall, and this process's CPU), blocks alternating.

    The store's append statement against the floor's INSERT, each durable
    and not, and against the PL/pgSQL function appends used before; SELECT 1
    is the bare round trip. Bodies weigh what a step's records weigh.
    """
    import psycopg

    from polyloop.stores import PostgresStore
    from polyloop.stores._pg_append import APPEND_ONE

    async with PostgresStore(url) as store:
        await store.list_runs()  # creates the schema
    intent = '{"record":"intent","x":"' + "x" * 180 + '"}'
    result = '{"record":"model_call_result","x":"' + "x" * 640 + '"}'
    floor_row = FLOOR_RECORD.decode()
    seq = 1
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    try:
        await conn.execute("CREATE TABLE IF NOT EXISTS polyloop_bench_floor (id bigserial PRIMARY KEY, body text)")
        await conn.execute(
            "INSERT INTO polyloop_runs (run_id, epoch, next_seq, holder, lease_until) "
            "VALUES ('bench-appends', 1, 1, 'bench', clock_timestamp() + interval '1 day')"
        )
        raw = psycopg.AsyncRawCursor(conn)

        async def insert(sync: bool) -> None:
            tail = "" if sync else " RETURNING set_config('synchronous_commit', 'off', true)"
            await conn.execute(f"INSERT INTO polyloop_bench_floor (body) VALUES (%s){tail}", (floor_row,), prepare=True)

        async def append(durable: bool) -> None:
            nonlocal seq
            body = intent if durable else result
            await raw.execute(APPEND_ONE, ("bench-appends", seq, 1, "x", body, "on" if durable else "off"), prepare=True)
            assert raw.rowcount == 1
            seq += 1

        async def function(durable: bool) -> None:
            nonlocal seq
            body = intent if durable else result
            cur = await conn.execute("SELECT polyloop_append(%s, %s, %s, %s, %s::json, %s)",
                                     ("bench-appends", seq, 1, "x", body, durable), prepare=True)
            assert (await cur.fetchone()) == ("ok",)
            seq += 1

        async def round_trip() -> None:
            await raw.execute("SELECT 1", prepare=True)

        kinds = {
            "INSERT, synchronous commit (half the floor)": lambda: insert(True),
            "append, durable": lambda: append(True),
            "append via polyloop_append(), durable (before)": lambda: function(True),
            "INSERT, asynchronous commit": lambda: insert(False),
            "append, not durable": lambda: append(False),
            "append via polyloop_append(), not durable (before)": lambda: function(False),
            "SELECT 1 (a round trip)": round_trip,
        }
        times: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
        for _ in range(blocks):
            for name, statement in kinds.items():
                start, cpu = time.perf_counter(), time.process_time()
                for _ in range(per_block):
                    await statement()
                times[name].append(((time.perf_counter() - start) / per_block, (time.process_time() - cpu) / per_block))
        await conn.execute("TRUNCATE polyloop_bench_floor")
    finally:
        await conn.close()
    return {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in times.items()}


def appends(url: str, quick: bool) -> None:
    medians = asyncio.run(_statements(url, blocks=3 if quick else 21, per_block=20 if quick else 100))
    unit = next(iter(medians.values()))[0]
    print("### Where an append's time goes (one connection, statements side by side)\n")
    print("| statement | per statement | / synchronous INSERT | this process's CPU |\n|---|---|---|---|")
    for name, (seconds, cpu) in medians.items():
        print(f"| {name} | {seconds * 1e3:.3f} ms | {seconds / unit:.2f}x | {cpu * 1e6:.0f} us |")


# -- 2 and 3: worker processes -------------------------------------------------------


class _Worker:
    def __init__(self, url: str, *, lease: float, concurrency: int, env: dict[str, str]) -> None:
        cmd = [sys.executable, "-m", "polyloop", "worker", "--store", url, "--lease", str(lease),
               "--concurrency", str(concurrency), "--poll", "0.05", "--json"]
        self.proc = subprocess.Popen(cmd, env={**os.environ, **env}, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        self.events: list[tuple[float, dict[str, Any]]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.events.append((time.monotonic(), json.loads(line)))

    def first(self, event: str, run_id: str | None) -> float | None:
        for t, e in list(self.events):
            if e["event"] == event and e["run_id"] == run_id:
                return t
        return None

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _wait(condition: Any, timeout: float) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise TimeoutError("the benchmark's workers did not get there in time")


async def _submit(url: str, run_ids: list[str]) -> None:
    from polyloop.stores import PostgresStore, submit

    async with PostgresStore(url) as store:
        for run_id in run_ids:
            await submit(store, f"{THIS}:bench_agent", goal="build every module", run_id=run_id)


def _finished(url: str, run_ids: list[str]) -> bool:
    import psycopg

    with psycopg.connect(url) as conn:
        n = conn.execute(
            "SELECT count(*) FROM polyloop_runs WHERE run_id = ANY(%s) AND status = 'finished'", (run_ids,)
        ).fetchone()
    return bool(n and n[0] == len(run_ids))


def throughput(url: str, processes: int, runs: int, steps: int) -> float:
    env = {"PL_BENCH_STEPS": str(steps)}
    workers = [_Worker(url, lease=15, concurrency=4, env=env) for _ in range(processes)]
    try:
        for w in workers:  # started, and polling an empty queue
            _wait(lambda: w.first("ready", None), timeout=60)
        run_ids = [f"bench-tp-{uuid.uuid4().hex[:10]}" for _ in range(runs)]
        start = time.monotonic()
        asyncio.run(_submit(url, run_ids))
        _wait(lambda: _finished(url, run_ids), timeout=600)
        elapsed = time.monotonic() - start
    finally:
        for w in workers:
            w.stop()
    return runs * (steps + 1) / elapsed


def takeover(url: str, lease: float, trials: int) -> list[float]:
    """Seconds from SIGKILL of a run's holder to the takeover by an idle worker, per trial.

    One run that never ends (its first tool call holds it) is passed from
    worker to worker: each trial starts an idle worker, waits until it polls
    the queue, kills the current holder, and times the takeover.
    """
    env = {"PL_BENCH_STEPS": "1", "PL_BENCH_HOLD": "3600"}
    run_id = f"bench-to-{uuid.uuid4().hex[:10]}"
    holder = _Worker(url, lease=lease, concurrency=1, env=env)
    latencies: list[float] = []
    try:
        _wait(lambda: holder.first("ready", None), timeout=60)
        asyncio.run(_submit(url, [run_id]))
        _wait(lambda: holder.first("claim", run_id), timeout=60)
        for _ in range(trials):
            idle = _Worker(url, lease=lease, concurrency=1, env=env)
            _wait(lambda: idle.first("ready", None), timeout=60)
            time.sleep(lease * 0.5)  # the holder is somewhere inside a renewal period
            holder.stop(signal.SIGKILL)
            killed = time.monotonic()
            latencies.append(_wait(lambda: idle.first("takeover", run_id), timeout=60) - killed)
            holder = idle
    finally:
        holder.stop(signal.SIGKILL)
    return latencies


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=os.environ.get("POLYLOOP_TEST_PG_URL", DEFAULT_URL))
    parser.add_argument("--quick", action="store_true", help="small sizes: checks that it runs")
    parser.add_argument("--lease", type=float, default=1.0, help="the lease of the takeover trials")
    parser.add_argument("--appends", action="store_true", help="only the per-statement breakdown of an append")
    args = parser.parse_args()
    # A schema of its own, dropped at the end: the database may be shared, and
    # the takeover trials leave a run that never ends.
    import psycopg

    schema = f"polyloop_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(args.url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        url = f"{args.url}{'&' if '?' in args.url else '?'}options=-csearch_path%3D{schema}"
        if args.appends:
            appends(url, args.quick)
        else:
            _figures(url, args)
    finally:
        with psycopg.connect(args.url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def _figures(url: str, args: argparse.Namespace) -> None:
    q = args.quick
    # Other work on a shared machine moves both sides; many short blocks keep the median steady.
    cost = step_cost(url, blocks=3 if q else 15, steps=20 if q else 200)
    print("### PostgreSQL store\n")
    print("| figure | value | target |\n|---|---|---|")
    print(f"| step / floor (two committed single-row INSERTs) | {cost['ratio']:.2f}x "
          f"({cost['step_ms']:.2f} ms / {cost['floor_ms']:.2f} ms; blocks' middle half "
          f"{cost['q1']:.2f}-{cost['q3']:.2f}x) | <= 2x |")
    rates = {p: throughput(url, p, runs=4 if q else 16, steps=10 if q else 50) for p in (1, 2, 4)}
    for p, rate in rates.items():
        print(f"| steps/s, {p} worker process{'es' if p > 1 else ''} x 4 runs | {rate:.0f} "
              f"({rate / rates[1]:.2f}x of 1 process) | |")
    trials = takeover(url, args.lease, trials=3 if q else 20)
    p50, p95 = _pct(trials, 0.5), _pct(trials, 0.95)
    print(f"| takeover p50 / lease ({len(trials)} trials, lease {args.lease:g} s) | {p50 / args.lease:.2f}x "
          f"({p50:.2f} s) | |")
    print(f"| takeover p95 / lease | {p95 / args.lease:.2f}x ({p95:.2f} s) | <= 2x |")


if __name__ == "__main__":
    main()
