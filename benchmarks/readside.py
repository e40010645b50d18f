"""Figure 4: the read side against a bare orjson parse of the same bytes.

* `read_log` + `classify` of one long log (what every resume and `inspect` do).
* `verify_logs` of a directory of thousands of logs (what CI runs), on one
  core and on all of them.

The logs are written with the library's own record classes and encoder, in
the order the run loop writes them, with the same ~500-byte messages as the
other figures (a 100,000-step run would take minutes to produce through the
loop; its bytes would have the same form). The baseline reads the same
files and decodes every line with `orjson.loads` and nothing else.
"""

from __future__ import annotations

import asyncio
import gc
import os
import time
from typing import Any

import orjson

from ._common import (
    FINAL,
    OBSERVATION,
    THOUGHT,
    TOOL_ARGS,
    TOOL_NAME,
    Section,
    Target,
    median,
    ratio,
    size,
)


def write_log(path: str, run_id: str, steps: int) -> None:
    """A finished run of `steps` tool steps and a final answer, as the loop writes it."""
    from polyloop import Intent, ModelCallResult, RunFinished, RunStarted, StepCompleted
    from polyloop._log.ids import idempotency_key, result_id
    from polyloop._log.records import encode

    usage = {"input_tokens": 1200, "output_tokens": 120}
    lines = [encode(RunStarted(run_id=run_id, goal="build every module", config={"max_steps": steps + 1}))]
    for step in range(1, steps + 2):
        m = result_id("model_call", step, 1)
        lines.append(encode(Intent(kind="model_call", step=step, attempt=1, result_id=m)))
        if step > steps:
            lines.append(encode(ModelCallResult(result_id=m, output={"text": FINAL, "tool_call": None}, usage=usage)))
            lines.append(encode(StepCompleted(step=step, result_id=None, observation=None)))
            break
        call = {"name": TOOL_NAME, "args": TOOL_ARGS}
        lines.append(encode(ModelCallResult(result_id=m, output={"text": THOUGHT, "tool_call": call}, usage=usage)))
        a = result_id("action", step, 1)
        lines.append(
            encode(
                Intent(
                    kind="action", step=step, attempt=1, result_id=a, tool=TOOL_NAME,
                    args=TOOL_ARGS, replay="safe", idempotency_key=idempotency_key(run_id, step, TOOL_NAME, TOOL_ARGS),
                )
            )
        )
        lines.append(encode(StepCompleted(step=step, result_id=a, observation=OBSERVATION)))
    lines.append(encode(RunFinished(reason="final_answer", result=FINAL, steps=steps + 1)))
    with open(path, "wb") as f:
        f.write(b"".join(lines))


def bare_parse(paths: list[str]) -> int:
    """The baseline: read each file and orjson-decode every line; nothing else."""
    loads = orjson.loads
    n = 0
    for path in paths:
        with open(path, "rb") as f:
            data = f.read()
        n += len([loads(line) for line in data.splitlines() if line])
    return n


def _best_of_interleaved(fns: dict[str, Any], reps: int) -> dict[str, float]:
    times: dict[str, list[float]] = {k: [] for k in fns}
    for rep in range(reps):
        for key in fns if rep % 2 == 0 else reversed(list(fns)):
            gc.collect()  # each contender starts from the same collector state
            start = time.perf_counter()
            fns[key]()
            times[key].append(time.perf_counter() - start)
    return {k: median(v) for k, v in times.items()}


def measure(workdir: str, *, quick: bool) -> list[Section]:
    from polyloop import JsonlStore, classify, verify_logs

    # Verify first, in this fresh process: forked workers then inherit a
    # small heap (the long log below leaves a large one behind).
    reps = 3 if quick else 5
    rows: list[list[str]] = []
    logs = 200 if quick else 4_000
    log_steps = 10 if quick else 20
    many = os.path.join(workdir, "verify-many")
    os.makedirs(many)
    for i in range(logs):
        write_log(os.path.join(many, f"run-{i:05d}.jsonl"), f"run-{i:05d}", log_steps)
    paths = sorted(os.path.join(many, name) for name in os.listdir(many))
    total = sum(os.path.getsize(p) for p in paths)
    cores = os.cpu_count() or 1

    def check(workers: int) -> None:
        report = verify_logs(many, workers=workers)
        assert report.summary == {"ok": logs, "torn_tail": 0, "corrupt": 0, "bad_product": 0}, report.summary

    verify_reps = reps
    v = _best_of_interleaved(
        {"bare": lambda: bare_parse(paths), "one": lambda: check(1), "all": lambda: check(cores)}, reps
    )
    rows.append(
        [
            f"`verify_logs`, {logs:,} logs of {log_steps} steps, 1 core",
            size(total),
            f"{v['bare'] * 1e3:,.0f} ms",
            f"{v['one'] * 1e3:,.0f} ms",
            ratio(v["one"] / v["bare"]),
        ]
    )
    rows.append(
        [
            f"`verify_logs`, same directory, {cores} cores",
            size(total),
            f"{v['bare'] * 1e3:,.0f} ms",
            f"{v['all'] * 1e3:,.0f} ms",
            ratio(v["all"] / v["bare"]),
        ]
    )
    verify_target = Target(f"verify speed-up, {cores} cores over 1", v["one"] / v["all"], 1.6, True)

    steps = 5_000 if quick else 100_000
    reps = 3
    directory = os.path.join(workdir, "read-one")
    os.makedirs(directory)
    write_log(os.path.join(directory, "long.jsonl"), "long", steps)
    path = os.path.join(directory, "long.jsonl")
    store = JsonlStore(directory)
    loop = asyncio.new_event_loop()

    def resume_read() -> None:
        recovery = classify(loop.run_until_complete(store.read_log("long")), run_id="long")
        assert recovery.status == "finished" and recovery.completed_steps == steps + 1

    from polyloop.stores._jsonl import parse_log

    def decode_only() -> None:
        with open(path, "rb") as f:
            assert len(parse_log(f.read()).records) == 4 * steps + 5

    t = _best_of_interleaved({"bare": lambda: bare_parse([path]), "decode": decode_only, "ours": resume_read}, reps)
    loop.close()
    read = Section(
        key="read",
        title="4. Read side against a bare orjson parse of the same bytes",
        columns=["work", "bytes", "bare parse", "PolyLoop", "ratio"],
    )
    records = 4 * steps + 5
    read.rows.append(
        [
            f"`read_log` + `classify`, one log of {steps:,} steps ({records:,} records)",
            size(os.path.getsize(path)),
            f"{t['bare'] * 1e3:,.0f} ms",
            f"{t['ours'] * 1e3:,.0f} ms",
            ratio(t["ours"] / t["bare"]),
        ]
    )
    read.rows.append(
        [
            "of which: strict decoding into records (`parse_log`), no classification",
            size(os.path.getsize(path)),
            f"{t['bare'] * 1e3:,.0f} ms",
            f"{t['decode'] * 1e3:,.0f} ms",
            ratio(t["decode"] / t["bare"]),
        ]
    )
    read.rows += rows
    read.targets.append(Target(f"read_log + classify of {steps:,} steps / bare parse", t["ours"] / t["bare"], 1.5))
    read.targets.append(verify_target)
    read.notes.append(
        f"Medians of {reps} (one log) and {verify_reps} (verify) interleaved repetitions; the files were just written, so all of them "
        f"read from the page cache. The bare parse runs on one core. Verify's speed-up from {cores} "
        f"cores: {ratio(v['one'] / v['all'])}."
    )
    return [read]

