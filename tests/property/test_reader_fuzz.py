"""Fuzz the readers: thousands of mutated and random byte strings through every way of reading a log.

Each input is written as `<run_id>.jsonl` and read by `JsonlStore.read_log`
(plus `classify`), `verify_file` and `inspect_run` (plus its JSON document
and its "what resume would do next" sentence). Every reader must return a
clear verdict — records or `CorruptLogError`; `ok`, `torn_tail` or
`corrupt` with the reasons; a `RunReport` — and the three must agree on
whether the log is corrupt. Anything else raised counts as a traceback. A
watchdog turns a hang into a failure. Then the CLI reads the same files:
`polyloop verify` over all of them in one process, `polyloop inspect`
(rendered and `--json`) over a sample.

`POLYLOOP_FUZZ_INPUTS` sets the number of inputs (default 3000);
`POLYLOOP_FUZZ_SEED` fixes the seed (printed on failure).
"""

from __future__ import annotations

import asyncio
import faulthandler
import json
import os
import random
import sys
import time
import traceback
from pathlib import Path

import orjson

import logkit
from support import forking
from polyloop import (
    CorruptLogError,
    JsonlStore,
    RunReport,
    classify,
    inspect_run,
    verify_file,
)

INPUTS = int(os.environ.get("POLYLOOP_FUZZ_INPUTS") or 3000)
SEED = int(os.environ.get("POLYLOOP_FUZZ_SEED") or random.SystemRandom().randrange(10**9))
SLOWEST_ALLOWED = 5.0  # seconds for one input: anything near this is a hang in the making

_VALUES = [
    None, True, False, 0, -1, 1, 2**63, -(2**63) - 1, 10**30, 1.5, float("nan"), "", "x", "s1-a1", "\u0000",
    "\x1b[2J", "\u202e", [], [1], {}, {"name": "a"}, {"tool_call": {"name": 1}}, {"input_tokens": "many"},
    {"input_tokens": None, "output_tokens": [1]}, {"text": 5}, {"text": None, "tool_call": {"name": "t", "args": []}},
]


def _mutate(rnd: random.Random, data: bytes, pool: list[bytes]) -> bytes:
    """One random byte-, line- or field-level mutation of a log."""
    lines = data.splitlines(keepends=True)
    op = rnd.randrange(16)
    if op == 0 and data:  # flip some bytes
        b = bytearray(data)
        for _ in range(rnd.randint(1, 5)):
            b[rnd.randrange(len(b))] = rnd.randrange(256)
        return bytes(b)
    if op == 1:  # insert random bytes
        i = rnd.randrange(len(data) + 1)
        return data[:i] + os.urandom(rnd.randint(1, 30)) + data[i:]
    if op == 2 and data:  # delete a range
        i = rnd.randrange(len(data))
        return data[:i] + data[i + rnd.randint(1, 80):]
    if op == 3:  # truncate anywhere
        return data[: rnd.randrange(len(data) + 1)]
    if op == 4 and lines:  # duplicate, drop or swap lines
        i, j = rnd.randrange(len(lines)), rnd.randrange(len(lines))
        choice = rnd.randrange(3)
        if choice == 0:
            lines.insert(j, lines[i])
        elif choice == 1:
            del lines[i]
        else:
            lines[i], lines[j] = lines[j], lines[i]
        return b"".join(lines)
    if op == 5:  # whitespace, blank lines, CRLF, a BOM
        return rnd.choice([b"\n\n" + data, data.replace(b"\n", b"\r\n"), b"\xef\xbb\xbf" + data,
                           data + b"   \n\t\n", data.replace(b"\n", b"\n\n")])
    if op == 6:  # splice two logs
        other = rnd.choice(pool)
        return data[: rnd.randrange(len(data) + 1)] + other[rnd.randrange(len(other) + 1):]
    if op == 7 and lines:  # NULs where a crash on some file systems leaves them
        i = rnd.randrange(len(lines))
        lines.insert(i, b"\x00" * rnd.randint(1, 600))
        return b"".join(lines)
    if op in (8, 9, 10, 11) and lines:  # a field gets another value, or goes, or a new one comes
        i = rnd.randrange(len(lines))
        try:
            obj = orjson.loads(lines[i])
        except orjson.JSONDecodeError:
            return data
        if not isinstance(obj, dict) or not obj:
            return data
        key = rnd.choice(sorted(obj))
        if op == 8:
            obj[key] = rnd.choice(_VALUES)
        elif op == 9:
            del obj[key]
        elif op == 10:
            obj[rnd.choice(["extra", "record", "schema_version", "step", "result_id"])] = rnd.choice(_VALUES)
        else:
            obj["record"] = rnd.choice(["run_started", "intent", "model_call_result", "step_completed",
                                        "run_finished", "resolution", "checkpoint"])
        try:
            lines[i] = orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE)
        except (TypeError, orjson.JSONEncodeError):
            lines[i] = json.dumps(obj).encode() + b"\n"  # NaN and friends, as another writer might
        return b"".join(lines)
    if op == 12:  # deep nesting, long lines, huge numbers, lone surrogates
        return data + rnd.choice([
            b'{"record":"intent","args":' + b"[" * 5000 + b"]" * 5000 + b"}\n",
            b'{"record":"step_completed","step":1,"result_id":null,"observation":"' + b"x" * 200_000 + b'"}\n',
            b'{"record":"intent","kind":"model_call","step":1e999,"attempt":1,"result_id":"s1-m1","at":"t"}\n',
            b'{"record":"resolution","result_id":"\\ud800","outcome":"executed","at":"t"}\n',
            b'{"record":"intent","kind":"model_call","step":99999999999999999999,"attempt":1,"result_id":"a","at":"t"}\n',
        ])
    if op == 13:  # random bytes
        return os.urandom(rnd.randrange(300))
    if op == 14:  # random JSON values, one per line
        values = _VALUES[:10] + [{"record": rnd.choice(["intent", "x"])}]
        return b"".join(json.dumps(rnd.choice(values)).encode() + b"\n" for _ in range(rnd.randint(1, 6)))
    return data


def _valid_log(rnd: random.Random, run_id: str) -> bytes:
    records = logkit.simulate(logkit.RandomDraw(rnd), run_id)
    records = records[: rnd.randint(1, len(records))]
    return logkit.to_bytes(records)


def inputs(seed: int, n: int) -> list[tuple[str, bytes]]:
    """`n` named inputs: valid logs of that run id, each mutated one or more times (some not at all)."""
    rnd = random.Random(seed)
    pool = [_valid_log(rnd, "pooled") for _ in range(30)]
    out = []
    for i in range(n):
        name = f"fuzz-{i:05d}"
        data = _valid_log(rnd, name)
        for _ in range(rnd.choice([0, 1, 1, 1, 2, 3, 5])):
            data = _mutate(rnd, data, pool)
        out.append((name, data))
    return out


async def _judge(store: JsonlStore, run_id: str) -> dict:
    """Every reader's verdict on one log file; raises only on a real failure of a reader."""
    path = store.path(run_id)
    try:
        records = await store.read_log(run_id)
        recovery = classify(records, run_id=run_id)
        recovery.next_action()
        corrupt_by_reader = False
    except CorruptLogError as exc:
        assert exc.problems and str(exc)
        corrupt_by_reader = True
    verdict = verify_file(path)
    assert verdict.status in ("ok", "torn_tail", "corrupt")
    if verdict.status == "torn_tail":  # only an unterminated last segment can be one
        assert not path.read_bytes().endswith(b"\n"), "a newline-terminated line taken for a torn tail"
    assert bool(verdict.problems) == (verdict.status != "ok")
    assert all(message for _, message in verdict.problems)
    orjson.dumps(verdict.to_json())
    report = await inspect_run(store, run_id)
    assert isinstance(report, RunReport)
    assert report.status in ("finished", "needs_operator", "resumable", "corrupt", "active")
    assert report.reason and report.next
    orjson.dumps(report.to_json())
    corrupt = {corrupt_by_reader, verdict.status == "corrupt", report.status == "corrupt"}
    assert len(corrupt) == 1, (f"readers disagree: read_log+classify corrupt={corrupt_by_reader}, "
                               f"verify={verdict.status}, inspect={report.status}")
    return {"status": verdict.status, "inspect": report.status}


def test_fuzzed_logs_get_a_clear_verdict_from_every_reader(tmp_path, reliability):
    cases = inputs(SEED, INPUTS)
    directory = tmp_path / "fuzz"
    directory.mkdir()
    for name, data in cases:
        (directory / f"{name}.jsonl").write_bytes(data)
    store = JsonlStore(directory)
    failures: list[str] = []
    verdicts: dict[str, dict] = {}
    slowest = (0.0, "")

    async def judge_all() -> None:
        nonlocal slowest
        for name, data in cases:
            started = time.monotonic()
            try:
                verdicts[name] = await _judge(store, name)
            except Exception:
                failures.append(f"{name} ({data[:300]!r}...):\n{traceback.format_exc()}")
            took = time.monotonic() - started
            slowest = max(slowest, (took, name))

    faulthandler.dump_traceback_later(300, exit=True)  # a hang ends the session loudly
    try:
        asyncio.run(judge_all())
    finally:
        faulthandler.cancel_dump_traceback_later()

    statuses = [v["status"] for v in verdicts.values()]
    reliability.add("fuzz.inputs", len(cases))
    reliability.add("fuzz.corrupt", statuses.count("corrupt"))
    reliability.add("fuzz.torn_tail", statuses.count("torn_tail"))
    reliability.add("fuzz.ok", statuses.count("ok"))
    reliability.add("tracebacks", len(failures))
    assert not failures, f"seed {SEED} (POLYLOOP_FUZZ_SEED): {len(failures)} failures; first:\n{failures[0]}"
    assert slowest[0] < SLOWEST_ALLOWED, f"{slowest[1]} took {slowest[0]:.1f}s (seed {SEED})"
    # The mix must exercise every verdict, or the fuzzer has gone blind.
    assert min(statuses.count(s) for s in ("ok", "torn_tail", "corrupt")) >= INPUTS // 100, (
        {s: statuses.count(s) for s in ("ok", "torn_tail", "corrupt")})

    # The command line over the same files: one `verify` over all, `inspect` over a sample.
    cli = [sys.executable, "-m", "polyloop"]
    done = forking.run([*cli, "verify", str(directory), "--json"], timeout=300)
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr[-3000:]
    doc = json.loads(done.stdout)
    by_cli = {Path(f["path"]).stem: f["status"] for f in doc["files"]}
    assert by_cli == {name: v["status"] for name, v in verdicts.items()}
    rnd = random.Random(SEED)
    sample = [rnd.choice([n for n, v in verdicts.items() if v["inspect"] == s] or list(verdicts))
              for s in ("finished", "needs_operator", "resumable", "corrupt", "corrupt", "resumable")]
    env = {**os.environ, "COLUMNS": "100"}
    for name in sample:
        for extra in ([], ["--json"]):
            shown = forking.run([*cli, "inspect", name, "--dir", str(directory), *extra], timeout=60, env=env)
            assert "Traceback" not in shown.stderr + shown.stdout, shown.stderr
            assert shown.returncode in (0, 1), (name, shown.returncode, shown.stderr)
            assert (shown.stdout + shown.stderr).strip()
            if extra:
                assert json.loads(shown.stdout)["status"] == verdicts[name]["inspect"]
    reliability.add("fuzz.cli_inputs", len(cases) + 2 * len(sample))
