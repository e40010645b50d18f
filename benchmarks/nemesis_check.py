"""The nemesis's checkers (benchmarks/nemesis.py) and its table.

Read from the database and the ground-truth file once the fleet has stopped:

* every `never` effect at most once per intent, unless the run records an
  unknown for it that an operator settled as not executed (duplicates);
* every effect has its intent in the log (an effect without one was not
  announced before it happened);
* every run finished, or stopped with a stated cause (parked, failed: a note);
* sequence numbers 0..n-1 without a gap, and the run row's `next_seq` is n;
* epochs never decrease along the log: no record of a fenced-out holder
  follows its successor's;
* takeover gaps: the time from the last record of one epoch to the first
  of the next, against the lease.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import psycopg


def check(url: str, run_ids: list[str], truth: Path, events: list[Path]) -> dict[str, Any]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT run_id, seq, epoch, kind, body::text, written_at FROM polyloop_records ORDER BY run_id, seq"
        ).fetchall()
        runs = {r[0]: r[1:] for r in conn.execute("SELECT run_id, status, note, next_seq FROM polyloop_runs")}
    logs: dict[str, list[tuple]] = defaultdict(list)
    for run_id, seq, epoch, kind, body, at in rows:
        logs[run_id].append((seq, epoch, kind, json.loads(body), at))
    violations: list[str] = []
    gaps: list[float] = []
    intents: set[tuple[str, str]] = set()
    not_executed: set[tuple[str, str]] = set()
    statuses: Counter[str] = Counter()
    for run_id in run_ids:
        status, note, next_seq = runs.get(run_id, ("missing", None, 0))
        log = logs.get(run_id, [])
        statuses[status] += 1
        if [r[0] for r in log] != list(range(len(log))) or next_seq != len(log):
            violations.append(f"{run_id}: sequence numbers not 0..{len(log) - 1} (next_seq {next_seq})")
        epochs = [r[1] for r in log]
        if epochs != sorted(epochs):
            violations.append(f"{run_id}: an epoch decreased along the log (a record after a fence): {epochs}")
        for _, _, kind, body, _ in log:
            if kind == "intent" and body.get("kind") == "action":
                intents.add((run_id, body["result_id"]))
            if kind == "resolution" and body.get("outcome") == "not_executed":
                not_executed.add((run_id, body["result_id"]))
        finished = any(r[2] == "run_finished" for r in log)
        if not (finished or (status in ("parked", "failed") and note)):
            violations.append(f"{run_id}: neither finished nor stopped with a cause (status {status}, note {note!r})")
    gaps = _takeover_gaps(logs, events)
    effects = [line.split() for line in (truth.read_text().splitlines() if truth.exists() else [])]
    per_intent = Counter((e[0], e[2]) for e in effects if e[3] == "charge")
    duplicates = sum(n - 1 for key, n in per_intent.items() if n > 1 and key not in not_executed)
    if duplicates:
        violations.append(f"{duplicates} duplicate `never` effects: {[k for k, n in per_intent.items() if n > 1][:5]}")
    unannounced = [e for e in effects if (e[0], e[2]) not in intents]
    if unannounced:
        violations.append(f"{len(unannounced)} effects without an intent in the log: {unannounced[:3]}")
    kinds = Counter(e[3] for e in effects)
    return {"violations": violations, "duplicates": duplicates, "gaps": gaps, "statuses": statuses,
            "never": kinds["charge"], "safe": kinds["look"], "records": len(rows)}


def _takeover_gaps(logs: dict[str, list[tuple]], events: list[Path]) -> list[float]:
    """For each takeover a worker reported: seconds from the replaced holder's last sign of life it left
    (its last record, or its own claim if it wrote nothing after it) to the claim."""
    claims: dict[tuple[str, int], float] = {}
    takeovers = []
    for path in events:
        for line in path.read_text().splitlines() if path.exists() else []:
            try:
                event = json.loads(line)
            except ValueError:  # a line cut by a SIGKILL
                continue
            if event.get("event") in ("claim", "takeover"):
                claims[(event["run_id"], event["epoch"])] = event["t"]
            if event.get("event") == "takeover":
                takeovers.append(event)
    gaps = []
    for event in takeovers:
        run_id, epoch = event["run_id"], event["epoch"]
        marks = [r[4].timestamp() for r in logs.get(run_id, []) if r[1] < epoch]
        marks += [t for (rid, e), t in claims.items() if rid == run_id and e < epoch]
        if marks:
            gaps.append(event["t"] - max(marks))
    return gaps


def _q(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q * 100) - 1]


def report(args: Any, nem: Any, found: dict[str, Any], extra: dict[str, Any]) -> str:
    """The nemesis table (docs/reliability.md), and the violations if any."""
    faults = ", ".join(f"{k} {n}" for k, n in sorted(nem.injected.items()))
    gaps = found["gaps"]
    st = found["statuses"]
    workers = len(nem.workers)
    rows = [
        ("seed", f"{args.seed}"),
        ("workers", f"{workers} ({workers - len(nem.proxies)} in a network namespace), {args.concurrency} runs each, lease {args.lease:g} s"),
        ("runs", f"{len(nem.runs)}, {extra['during']} submitted while faults were injected ({st['finished']} finished, {st['parked']} parked, {st['failed']} failed, "
                 f"{len(nem.runs) - st['finished'] - st['parked'] - st['failed']} other)"),
        ("faults injected", f"{sum(nem.injected.values())} in {extra['chaos_s']:.0f} s: {faults}"),
        ("effects (ground truth)", f"{found['never']} `never`, {found['safe']} `safe` (each replay counted); "
                                   f"{found['records']} records"),
        ("unknowns settled by the operator step", f"{extra['settled']}"),
        ("duplicate `never` effects", f"{found['duplicates']}"),
        ("takeovers", f"{len(gaps)}: the replaced holder's last record (or claim) to the new claim, p50 {_q(gaps, 0.5):.2f} s, "
                      f"p95 {_q(gaps, 0.95):.2f} s (lease {args.lease:g} s)"),
        ("workers that died without a SIGKILL", f"{len(nem.died)}"),
        ("checker violations", f"{len(found['violations'])}"),
    ]
    lines = ["| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)]
    lines += [f"VIOLATION: {v}" for v in found["violations"][:20]]
    lines += [f"DIED: {d}" for d in nem.died[:3]]
    return "\n".join(lines)
