"""A randomized nemesis: PostgreSQL workers running agents with side effects, under faults in combination.

    python benchmarks/nemesis.py                     # 4 workers, >= 200 runs, 1,000 faults
    python benchmarks/nemesis.py --ci                # the short CI mode (tests/nemesis runs it, slow)
    python benchmarks/nemesis.py --seed 1234         # replay a schedule

A throwaway PostgreSQL (initdb in a temporary directory; never the shared
server), `--workers` worker processes (benchmarks/nemesis_worker.py) each
behind a TCP proxy of its own, one more in a network namespace of its own
(root only) reaching the server over a veth pair, and runs of an agent
whose `never` and `safe` tools append each execution to an fsync'd
ground-truth file (benchmarks/nemesis_agents.py). Runs are submitted in
waves so work stays queued until the schedule is done. A seeded random
schedule then injects faults, several at a time:

* `kill` — SIGKILL a worker (respawned a moment later);
* `stop` — SIGSTOP a worker past its lease, then SIGCONT (it wakes fenced out);
* `restart` — `pg_ctl restart -m immediate` of the server;
* `blackhole` / `reset` / `delay` — a worker's proxy holds every byte, cuts
  every connection, or holds the server's replies for a while;
* `clock` — a worker's lease clock jumps an hour forward or back (the lease-clock seam);
* `link` — the namespaced worker's link goes down, then up, while it runs.

Then everything heals, parked runs are settled from the ground truth as an
operator would (executed iff the effect's line is there), the runs finish,
and the checkers run: every `never` effect at most once (duplicates = 0),
every effect preceded by its intent in the log, every run finished or
stopped with a stated cause, contiguous sequence numbers, epochs never
decreasing (so no record of a fenced-out holder after its successor's),
and the takeover gap (last record of one epoch to the first of the next)
p50/p95 against the lease. The seed is printed first: any failure replays.
Exit 0 when every checker passed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import psycopg

from nemesis_faults import Namespace, Proxy, Server, WorkerProc, namespaces_work, wait_until

from polyloop import mark_resolved
from polyloop.stores import PostgresStore, submit

TARGET = f"{Path(__file__).with_name('nemesis_agents.py')}:agent"
KINDS = {"kill": 3, "stop": 2, "restart": 1, "blackhole": 2, "reset": 2, "delay": 2, "clock": 2, "link": 1}


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--runs", type=int, default=200, help="at least this many runs")
    p.add_argument("--faults", type=int, default=1000)
    p.add_argument("--gap", type=float, default=0.12, help="mean seconds between faults")
    p.add_argument("--lease", type=float, default=2.0)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--no-netns", action="store_true", help="no worker in a network namespace")
    p.add_argument("--ci", action="store_true", help="the short mode: 200 runs, 120 faults")
    args = p.parse_args(argv)
    if args.ci:
        args.faults, args.gap = 120, 0.1
    args.seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    return args


class Nemesis:
    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.truth = work / "truth"
        self.netns = Namespace() if not args.no_netns and namespaces_work() else None
        self.server = Server(extra_host=self.netns.host_ip if self.netns else None)
        upstream = ("127.0.0.1", self.server.port)
        self.proxies = [Proxy(lambda: socket.create_connection(upstream, timeout=2)) for _ in range(args.workers)]
        env = {**os.environ, "NEMESIS_TRUTH": str(self.truth), "NEMESIS_STEPS": str(args.steps)}
        self.workers = [
            WorkerProc(i, f"postgresql://postgres@127.0.0.1:{proxy.port}/postgres", env, work / f"events-{i}.jsonl",
                       lease=args.lease, concurrency=args.concurrency)
            for i, proxy in enumerate(self.proxies)
        ]
        if self.netns:
            url = f"postgresql://postgres@{self.netns.host_ip}:{self.server.port}/postgres"
            self.workers.append(WorkerProc(len(self.workers), url, env, work / "events-ns.jsonl",
                                           lease=args.lease, concurrency=args.concurrency, netns=self.netns.name))
        self.injected: Counter[str] = Counter()
        self.timers: list[threading.Timer] = []
        self.restarting = threading.Lock()
        self.runs: list[str] = []
        self.died: list[str] = []  # the last words of workers that died without a SIGKILL

    # -- faults --------------------------------------------------------------------------------

    def later(self, seconds: float, fn) -> None:
        timer = threading.Timer(seconds, fn)
        timer.daemon = True
        self.timers.append(timer)
        timer.start()

    def inject(self) -> None:
        for worker in self.workers:  # a worker that died of its own accord: a finding, respawned
            if not worker.alive and not worker.killed:
                last = worker.events.read_text().splitlines()[-2:] if worker.events.exists() else []
                self.died.append(f"exit {worker.proc.returncode}, last events {last}, "
                                 + worker.events.with_suffix(".stderr").read_text()[-1500:])
                worker.spawn()
        kinds = [k for k in KINDS if k != "link" or self.netns]
        kind = self.rng.choices(kinds, [KINDS[k] for k in kinds])[0]
        worker = self.rng.choice(self.workers)
        lease = self.args.lease
        if kind == "kill":
            if not worker.signal(signal.SIGKILL):
                return
            self.later(self.rng.uniform(0.2, 1.0), worker.spawn)
        elif kind == "stop":
            if worker.stopped or not worker.signal(signal.SIGSTOP):
                return
            self.later(lease * self.rng.uniform(1.2, 2.5), lambda w=worker: w.signal(signal.SIGCONT))
        elif kind == "restart":
            if not self.restarting.acquire(blocking=False):
                return
            threading.Thread(target=self._restart, daemon=True).start()
        elif kind in ("blackhole", "reset", "delay"):
            if worker.index >= len(self.proxies):
                return
            proxy = self.proxies[worker.index]
            if kind == "reset":
                proxy.cut()
            else:
                proxy.blackhole() if kind == "blackhole" else proxy.hold_replies()
                self.later(self.rng.uniform(0.2, lease * (1.5 if kind == "blackhole" else 0.5)), proxy.restore)
        elif kind == "clock":
            if worker.stopped or time.monotonic() - worker.born < 2 or not worker.signal(self.rng.choice([signal.SIGUSR1, signal.SIGUSR2])):
                return
        elif kind == "link":
            assert self.netns is not None
            self.netns.link(False)
            self.later(self.rng.uniform(0.5, lease * 2), lambda: self.netns.link(True))
        self.injected[kind] += 1

    def _restart(self) -> None:
        try:
            self.server.restart_immediate()
        finally:
            time.sleep(1.0)  # let the fleet reconnect before the next restart
            self.restarting.release()

    def heal(self) -> None:
        for timer in self.timers:
            timer.cancel()
        for proxy in self.proxies:
            proxy.restore()
        if self.netns:
            self.netns.link(True)
        with self.restarting:
            pass
        for worker in self.workers:
            if not worker.alive:
                worker.spawn()
            worker.signal(signal.SIGCONT)

    # -- runs ----------------------------------------------------------------------------------

    async def submit_wave(self, n: int) -> None:
        async with PostgresStore(self.server.url) as store:
            for _ in range(n):
                run_id = f"nem-{uuid.uuid4().hex[:10]}"
                await submit(store, TARGET, goal="work", run_id=run_id)
                self.runs.append(run_id)

    def queued(self, *, claimable: bool = False) -> int:
        """Runs queued (held or not), or only those no live lease holds."""
        free = " AND (holder IS NULL OR lease_until <= clock_timestamp())" if claimable else ""
        with psycopg.connect(self.server.url, connect_timeout=3) as conn:
            return conn.execute(f"SELECT count(*) FROM polyloop_runs WHERE status = 'queued'{free}").fetchone()[0]

    async def settle_parked(self) -> int:
        """Settle each parked run's unknown actions from the ground truth (executed iff its line is there)."""
        executed = {(line.split()[0], line.split()[2]) for line in _lines(self.truth)}
        settled = 0
        with psycopg.connect(self.server.url) as conn:
            parked = [r[0] for r in conn.execute("SELECT run_id FROM polyloop_runs WHERE status = 'parked'")]
        async with PostgresStore(self.server.url) as store:
            for run_id in parked:
                from polyloop import inspect_run

                doc = (await inspect_run(store, run_id)).to_json()
                for e in doc.get("waiting") or ():
                    done = (run_id, e["id"]) in executed
                    await mark_resolved(store, run_id, e["id"], executed=done, reason="nemesis: from the ground truth",
                                        observation="done" if done else None)
                    settled += 1
        return settled

    def close(self) -> None:
        for worker in self.workers:
            worker.stop()
        for proxy in self.proxies:
            proxy.close()
        self.server.close()
        if self.netns:
            self.netns.close()


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def drive(nem: Nemesis) -> dict:
    args = nem.args
    # Little backlog: a run whose holder died is taken over by a worker with a free slot, not queued behind others.
    wave = max(4, len(nem.workers) * args.concurrency // 2)
    await nem.submit_wave(wave)
    start = time.monotonic()
    while sum(nem.injected.values()) < args.faults:
        time.sleep(nem.rng.expovariate(1 / args.gap))
        nem.inject()
        if _try(lambda: nem.queued(claimable=True), wave) < len(nem.workers):
            await _try_async(lambda: nem.submit_wave(wave))
    while len(nem.runs) < args.runs:  # at least --runs runs, even when the schedule ended first
        await _try_async(lambda: nem.submit_wave(min(wave, args.runs - len(nem.runs))))
    chaos = time.monotonic() - start
    during = len(nem.runs)
    nem.heal()
    settled = 0
    for _ in range(5):  # parked runs are settled as an operator would; the workers finish them
        wait_until(lambda: _try(nem.queued, 1) == 0, 180)
        n = await nem.settle_parked()
        settled += n
        if not n:
            break
    wait_until(lambda: _try(nem.queued, 1) == 0, 180)
    return {"chaos_s": chaos, "settled": settled, "during": during}


def _try(fn, default):
    try:
        return fn()
    except Exception:  # noqa: BLE001 - the server is restarting
        return default


async def _try_async(fn) -> None:
    try:
        await fn()
    except Exception:  # noqa: BLE001 - the server is restarting: the next tick submits
        pass


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    print(f"nemesis seed {args.seed} (replay: python benchmarks/nemesis.py --seed {args.seed}"
          f"{' --ci' if args.ci else ''})", flush=True)
    from nemesis_check import check, report

    with tempfile.TemporaryDirectory(prefix="polyloop-nemesis-work-") as tmp:
        nem = Nemesis(args, Path(tmp))
        try:
            extra = asyncio.run(drive(nem))
            for worker in nem.workers:
                worker.stop()
            found = check(nem.server.url, nem.runs, nem.truth, [w.events for w in nem.workers])
        finally:
            nem.close()
    print(report(args, nem, found, extra))
    return 0 if not found["violations"] else 1


if __name__ == "__main__":
    sys.exit(main())
