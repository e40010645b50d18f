"""The crash harness: real child processes, real SIGKILL, the CLI as the operator, and an oracle.

A *world* is one scenario's directory: the run directory, the side-effect
file and the model-call ledger the agent writes (`crash_agent.py`). The
harness runs the agent in a child process (`crash_child.py`) that kills
itself at a chosen point, then drives recovery through the `polyloop`
command line exactly as an operator would: `resume`; on exit 3, `inspect
--json` to find the unknown `never` executions, `mark-resolved` each one
`--executed` or `--not-executed` according to the side-effect file (the
ground truth the world keeps, not the log); `resume` again; `verify`.

Only the agent is killed, so by default the operator's commands run the same typer app in this
process (same arguments, exit codes and output, no Python start each); `in_process=False` (the
one whole-CLI matrix, test_kill_points.py) or a knob that acts on a process makes them processes.

The oracle never asks the library how to read the log it is judging: the
expected log is computed from the uninterrupted ("golden") run and the
kill point alone, and the recovered log is normalised by a separate
implementation (`normalise`).

What "equal to an uninterrupted run" means, precisely:

* drop timestamps (`at`);
* drop every `resolution` record, and every `resumed` record (log format 1.2:
  a resume's own bookkeeping, which an uninterrupted run never needs);
* drop every intent that has no result of its own: a model call or `safe`
  action that a later attempt superseded, or a `never` action an operator
  settled `not_executed` (each is an *extra attempt*);
* renumber the remaining attempts to 1 (result ids `sN-m1`, `sN-a1`, and
  the `step_completed` / `model_call_result` records that name them).

The result must equal the golden log record for record, and the extra
attempts dropped must be exactly the ones the kill point forces — none
hidden, none invented.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from polyloop import Intent, ModelCallResult, Resolution, Resumed, RunStarted, StepCompleted
from polyloop.stores._jsonl import parse_log
from polyloop.testing import logical
from support import forking
from support.cli import IN_PROCESS, polyloop_in_process
from support.forking import Forked
from support.sampling import sampled, selected  # noqa: F401 (the kill matrices import them from here)

HERE = Path(__file__).resolve().parent
AGENT_FILE = HERE / "crash_agent.py"
CHILD = HERE / "crash_child.py"
RUN_ID = "crash-run"
GOAL = "prove the crash story"
PYTHON = sys.executable

# The command line under test, run as a user runs it.
CLI = [PYTHON, "-m", "polyloop"]

TRACEBACK = "Traceback (most recent call last)"

# The knobs of crash_agent.py that act on the process running the agent: a command given one
# of them runs as a real process even in an in-process world.
PROCESS_KNOBS = ("POLYLOOP_KILL_AT", "POLYLOOP_FAULT", "POLYLOOP_SLOW", "POLYLOOP_BARRIER",
                 "POLYLOOP_BLOCK", "POLYLOOP_AT_EFFECT", "POLYLOOP_DEBUG", "POLYLOOP_STARTED")



def target(name: str = "agent") -> str:
    return f"{AGENT_FILE}:{name}"


@dataclass
class Proc:
    """A finished child process: how it ended and what it said."""

    args: list[str]
    code: int
    out: str
    err: str
    seconds: float
    in_process: bool = False  # a command run through the CLI app in this process, not a process

    @property
    def killed(self) -> bool:
        return self.code == -signal.SIGKILL

    def __str__(self) -> str:
        return (
            f"$ {' '.join(self.args[2:] if self.args[:2] == CLI[:2] else self.args)}\n"
            f"exit {self.code} after {self.seconds:.2f}s\nstdout: {self.out.strip()}\n"
            f"stderr: {self.err.strip()}"
        )


def _record_key(r: Any) -> str:
    return f"intent:{r.kind}" if isinstance(r, Intent) else r.TAG


class World:
    """One scenario: a run directory plus the world's own records of what happened."""

    def __init__(self, root: Path, agent: str = "agent", *, extra_env: dict[str, str] | None = None,
                 in_process: bool = True) -> None:
        self.in_process = in_process
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.dir = self.root / "runs"
        self.effects_path = self.root / "effects.ndjson"
        self.ledger_path = self.root / "ledger.ndjson"
        self.agent = agent
        self.target = target(agent)
        self.procs: list[Proc] = []
        with IN_PROCESS:  # never a copy of another command's environ
            base = dict(os.environ)
        self.env = {
            **base,
            "POLYLOOP_EFFECTS": str(self.effects_path),
            "POLYLOOP_LEDGER": str(self.ledger_path),
            "POLYLOOP_DIR": str(self.dir),
            "POLYLOOP_LOG": str(self.log_path),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        for name in (*PROCESS_KNOBS, "POLYLOOP_BIG", "POLYLOOP_FOREIGN_LOG"):
            self.env.pop(name, None)
        self.env.update(extra_env or {})

    @property
    def log_path(self) -> Path:
        return self.dir / f"{RUN_ID}.jsonl"

    # -- processes ---------------------------------------------------------------

    def spawn(self, args: list[str], env: dict[str, str] | None = None, **kw: Any) -> subprocess.Popen | Forked:
        """A real process (forked from the test zygote when it can be: `support.forking`)."""
        how = dict(env={**self.env, **(env or {})}, cwd=self.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                   text=True, **kw)
        return forking.popen(args, **how)

    def finish(self, proc: subprocess.Popen | Forked, args: list[str], started: float, timeout: float = 60) -> Proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(f"hung for {timeout}s: {' '.join(args)}\n{out}\n{err}") from None
        p = Proc(args, proc.returncode, out, err, time.monotonic() - started)
        self.procs.append(p)
        return p

    def call(self, args: list[str], env: dict[str, str] | None = None, timeout: float = 60) -> Proc:
        started = time.monotonic()
        return self.finish(self.spawn(args, env), args, started, timeout)

    def cli(self, *args: str, env: dict[str, str] | None = None, timeout: float = 60) -> Proc:
        full = {**self.env, **(env or {})}
        if self.in_process and not any(full.get(k) for k in PROCESS_KNOBS):
            return self.cli_in_process(list(args), full)
        return self.call([*CLI, *args], env, timeout)

    def cli_in_process(self, args: list[str], env: dict[str, str]) -> Proc:
        """The `polyloop` typer app called in this process with `env` as its whole environment."""
        started = time.monotonic()
        done = polyloop_in_process(*args, cwd=self.root, env=env)
        p = Proc([*CLI, *args], done.code, done.stdout, done.stderr, time.monotonic() - started, True)
        self.procs.append(p)
        return p

    def child(self, *args: str, env: dict[str, str] | None = None) -> Proc:
        return self.call([PYTHON, str(CHILD), *args], env)

    def child_run(self, *, kill_at: str | None = None, fault: str | None = None,
                  env: dict[str, str] | None = None) -> Proc:
        extra = dict(env or {})
        if kill_at:
            extra["POLYLOOP_KILL_AT"] = kill_at
        if fault:
            extra["POLYLOOP_FAULT"] = fault
        return self.child("run", self.target, RUN_ID, GOAL, str(self.dir), env=extra)

    def child_resolve(self, result_id: str, executed: bool, observation: str, *,
                      kill_at: str = "", fault: str = "") -> Proc:
        outcome = "executed" if executed else "not_executed"
        return self.child("resolve", RUN_ID, result_id, outcome, observation, str(self.dir),
                          env={"POLYLOOP_KILL_AT": kill_at, "POLYLOOP_FAULT": fault})

    # -- the operator, through the CLI ---------------------------------------------

    def run(self, **kw: Any) -> Proc:
        return self.cli("run", self.target, "--run-id", RUN_ID, "--goal", GOAL, "--dir", str(self.dir), **kw)

    def resume(self, **kw: Any) -> Proc:
        return self.cli("resume", RUN_ID, "--dir", str(self.dir), **kw)

    def inspect(self) -> dict[str, Any]:
        p = self.cli("inspect", RUN_ID, "--dir", str(self.dir), "--json")
        assert p.code in (0, 1, 3) and p.out.strip(), str(p)
        return json.loads(p.out)

    def verify(self, *, strict: bool = True) -> dict[str, Any]:
        return self.verify_all(self.dir, strict=strict)

    def verify_all(self, directory: Path, *, strict: bool = True) -> dict[str, Any]:
        """`polyloop verify DIR --json [--strict]` must pass; returns its document."""
        args = ["verify", str(directory), "--json"] + (["--strict"] if strict else [])
        p = self.cli(*args)
        doc = json.loads(p.out)
        assert p.code == 0, f"verify failed:\n{p}"
        assert doc["summary"]["corrupt"] == 0 and (not strict or doc["summary"]["torn_tail"] == 0), doc
        return doc

    def settle(self) -> list[tuple[str, str]]:
        """Settle every unknown `never` execution from the ground truth; returns (id, outcome)."""
        doc = self.inspect()
        assert doc["status"] == "needs_operator", doc
        unknown = [e for e in doc["executions"]
                   if e["state"] == "unknown" and e["kind"] == "action" and e["replay"] == "never"]
        assert unknown, doc
        settled = []
        for e in unknown:
            landed = [x for x in self.effects() if x["result_id"] == e["id"]]
            assert len(landed) <= 1, f"{e['id']} ran {len(landed)} times"
            if landed:
                p = self.cli("mark-resolved", RUN_ID, e["id"], "--executed", "--observation",
                             landed[0]["observation"], "--reason", "the side effect is there",
                             "--dir", str(self.dir))
                settled.append((e["id"], "executed"))
            else:
                p = self.cli("mark-resolved", RUN_ID, e["id"], "--not-executed", "--reason",
                             "the side effect is not there", "--dir", str(self.dir))
                settled.append((e["id"], "not_executed"))
            assert p.code == 0, str(p)
        return settled

    def recover(self, *, rounds: int = 8) -> list[str]:
        """Drive the run to its end through the CLI; returns a transcript of what it took."""
        steps: list[str] = []
        for _ in range(rounds):
            before = self.effects()
            if not self.log_path.exists():
                p = self.resume()
                assert p.code == 2 and "no run" in p.err, f"resume of a run that was never created:\n{p}"
                p = self.run()
                steps.append(f"run:{p.code}")
            else:
                p = self.resume()
                steps.append(f"resume:{p.code}")
            if p.code == 0:
                return steps
            assert p.code == 3, f"unexpected exit:\n{p}"
            assert "mark-resolved" in p.err, f"exit 3 without saying what to do:\n{p}"
            assert self.effects() == before, "a resume that stopped for an operator ran a tool"
            for rid, outcome in self.settle():
                steps.append(f"mark-resolved {rid} {outcome}")
        raise AssertionError(f"no end after {rounds} rounds: {steps}")

    # -- what the world knows ------------------------------------------------------

    def records(self) -> list[Any]:
        parsed = parse_log(self.log_path.read_bytes())
        assert not parsed.problems, parsed.problems
        return parsed.records

    def effects(self) -> list[dict[str, Any]]:
        return _jsonl(self.effects_path)

    def ledger(self) -> list[dict[str, Any]]:
        return _jsonl(self.ledger_path)

    @property
    def processes(self) -> int:
        """How many real processes this world started (commands run in-process not counted)."""
        return sum(not p.in_process for p in self.procs)

    def tracebacks(self) -> int:
        return sum(TRACEBACK in p.err or TRACEBACK in p.out for p in self.procs)


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


# -- the golden run and its timeline ---------------------------------------------------


@dataclass(frozen=True)
class Golden:
    records: list[Any]
    effects: list[dict[str, Any]]
    ledger: list[dict[str, Any]]
    events: list[tuple[str, str, int, Any]]  # (kind of event, key, nth of its key, record)
    replay: dict[str, str]  # tool name -> replay policy

    @property
    def logical(self) -> list[dict[str, Any]]:
        return logical(self.records)

    def kill_points(self) -> list[str]:
        """Before and after every write and every side effect of the uninterrupted run."""
        points = []
        for kind, key, n, _ in self.events:
            if kind in ("write", "effect"):
                points += [f"before:{key}:{n}", f"after:{key}:{n}"]
        return points


def golden_run(root: Path, agent: str = "agent", *, extra_env: dict[str, str] | None = None) -> Golden:
    """Run the agent once without interruption, in a child process, and read back the truth."""
    w = World(root, agent, extra_env=extra_env)
    p = w.child_run()
    assert p.code == 0, str(p)
    records = w.records()
    events: list[tuple[str, str, int, Any]] = []
    counts: Counter[str] = Counter()
    for r in records:
        key = _record_key(r)
        counts[key] += 1
        events.append(("write", key, counts[key], r))
        if key == "intent:model_call":
            events.append(("call", "call", r.step, r))
        elif key == "intent:action":
            counts["effect"] += 1
            events.append(("effect", "effect", counts["effect"], r))
    replay = {t["name"]: t["replay"] for t in records[0].config["tools"]}
    effects, ledger = w.effects(), w.ledger()
    assert len(effects) == counts["effect"] and len(ledger) == counts["intent:model_call"]
    return Golden(records, effects, ledger, events, replay)


@dataclass
class Expected:
    """What recovery from one kill point must produce, derived from the golden run only."""

    extras: list[tuple[str, int, str]]  # (kind, step, why) of each extra attempt
    resolutions: list[tuple[str, str]]  # (result id, outcome)
    effect_attempts: list[tuple[str, int]]  # (tool:args, attempt) in order
    ledger_steps: list[int]
    status_after_crash: str  # what inspect says right after the kill ("absent" = no log)


def expect(golden: Golden, point: str) -> Expected:
    """The expected outcome of recovering from a kill at `point` (see module docstring)."""
    if point.startswith("create:"):
        index = 0 if point != "create:before-dir-fsync" else 1  # published, then killed
        prefix = golden.events[:index]
    else:
        when, _, rest = point.partition(":")
        key, _, n = rest.rpartition(":")
        index = next(i for i, (kind, k, m, _) in enumerate(golden.events)
                     if kind in ("write", "effect") and k == key and m == int(n))
        prefix = golden.events[: index + (when == "after")]
    log = [r for kind, _, _, r in prefix if kind == "write"]
    results = {r.result_id for r in log if isinstance(r, ModelCallResult | StepCompleted)}
    open_intents = [r for r in log if isinstance(r, Intent) and r.result_id not in results]
    called = {r.step for kind, _, _, r in prefix if kind == "call"}
    landed = {r.result_id for kind, _, _, r in prefix if kind == "effect"}
    effects = [(_effect_key(e), 1) for e in golden.effects]
    ledger = [e["step"] for e in golden.ledger]
    extras: list[tuple[str, int, str]] = []
    resolutions: list[tuple[str, str]] = []
    status = "absent" if not log else "finished" if log[-1].TAG == "run_finished" else "resumable"
    assert len(open_intents) <= 1
    for it in open_intents:
        if it.kind == "model_call":
            extras.append(("model_call", it.step, "superseded"))
            if it.step in called:  # paid for, result lost: the re-issue is a second paid call
                ledger.insert(ledger.index(it.step) + 1, it.step)
            continue
        pos = next(i for i, e in enumerate(golden.effects) if e["result_id"] == it.result_id)
        key = effects[pos][0]
        if golden.replay[it.tool] == "safe":
            extras.append(("action", it.step, "superseded"))
            effects[pos : pos + 1] = [(key, 1), (key, 2)] if it.result_id in landed else [(key, 2)]
        elif it.result_id in landed:
            resolutions.append((it.result_id, "executed"))
            status = "needs_operator"
        else:
            resolutions.append((it.result_id, "not_executed"))
            extras.append(("action", it.step, "resolved-not-executed"))
            effects[pos] = (key, 2)
            status = "needs_operator"
    return Expected(extras, resolutions, effects, ledger, status)


def _effect_key(e: dict[str, Any]) -> str:
    return f"{e['tool']}:{orjson.dumps(e['args'], option=orjson.OPT_SORT_KEYS).decode()}"


# -- normalising a recovered log ----------------------------------------------------------


def normalise(records: Sequence[Any]) -> tuple[list[dict[str, Any]], list[tuple[str, int, str]]]:
    """The logical log without extra attempts, and the extra attempts (kind, step, why) dropped."""
    has_result = {r.result_id for r in records if isinstance(r, ModelCallResult | StepCompleted) and r.result_id}
    not_executed = {r.result_id for r in records if isinstance(r, Resolution) and r.outcome == "not_executed"}
    intents = [r for r in records if isinstance(r, Intent)]
    extras = []
    rename: dict[str, str] = {}
    for i, it in enumerate(intents):
        if it.result_id in has_result:
            rename[it.result_id] = f"s{it.step}-{'m' if it.kind == 'model_call' else 'a'}1"
            continue
        later = any(o.step == it.step and o.kind == it.kind for o in intents[i + 1 :])
        if it.result_id in not_executed:
            why = "resolved-not-executed"
        elif later:
            why = "superseded"
        else:
            why = "unknown"  # an open unknown at the end: never right for a finished run
        extras.append((it.kind, it.step, why))
    out = []
    for r in records:
        if isinstance(r, Resolution | Resumed):
            continue
        if isinstance(r, Intent):
            if r.result_id not in rename:
                continue
            r = dataclasses.replace(r, attempt=1, result_id=rename[r.result_id])
        elif isinstance(r, ModelCallResult | StepCompleted) and r.result_id in rename:
            r = dataclasses.replace(r, result_id=rename[r.result_id])
        out.append(r)
    return logical(out), extras


# -- the checks every recovered run must pass ---------------------------------------------


@dataclass
class Verdict:
    duplicates: int  # `never` side effects that happened more than once
    lost: int  # executions that happened (world) but are not visible in the log


def audit(golden: Golden, w: World, expected: Expected | None = None) -> Verdict:
    """Check a recovered run against the golden run and the world's ground truth.

    With `expected` (a kill point's exact prediction) every extra attempt,
    resolution, side effect and paid model call must match it exactly;
    without it (random kills) the invariants must hold for whatever
    happened. Raises AssertionError with the details on any mismatch.
    """
    records = w.records()
    effects, ledger = w.effects(), w.ledger()
    never = {t for t, policy in golden.replay.items() if policy == "never"}

    # Never repeat silently: each `never` side effect happened once.
    per_key = Counter(_effect_key(e) for e in effects if e["tool"] in never)
    duplicates = sum(c - 1 for c in per_key.values() if c > 1)
    assert set(per_key) == {_effect_key(e) for e in golden.effects if e["tool"] in never}, effects

    # Never lose silently: everything that happened is visible in the log.
    intents = {r.result_id: r for r in records if isinstance(r, Intent)}
    completed = {r.result_id for r in records if isinstance(r, StepCompleted) and r.result_id}
    lost = 0
    for e in effects:
        if e["result_id"] not in intents:
            lost += 1  # a side effect with no intent at all
        elif e["tool"] in never and e["result_id"] not in completed:
            lost += 1  # it ran, yet the log does not carry its result
    calls = Counter(x["step"] for x in ledger)
    visible = Counter(r.step for r in intents.values() if r.kind == "model_call")
    lost += sum(max(0, calls[s] - visible[s]) for s in calls)
    for r in records:
        if isinstance(r, Resolution):
            landed = any(e["result_id"] == r.result_id for e in effects)
            assert landed == (r.outcome == "executed"), f"resolution contradicts the world: {r}"

    assert duplicates == 0, f"{duplicates} `never` side effects repeated: {effects}"
    assert lost == 0, f"{lost} executions happened without a trace in the log: {effects} {ledger}"

    # Equal to the uninterrupted run once the extra attempts are taken out.
    normal, extras = normalise(records)
    assert normal == golden.logical, _diff(normal, golden.logical)
    assert all(why != "unknown" for _, _, why in extras), extras
    assert isinstance(records[0], RunStarted) and records[-1].TAG == "run_finished"

    if expected is not None:
        assert extras == expected.extras, (extras, expected.extras)
        got = [(r.result_id, r.outcome) for r in records if isinstance(r, Resolution)]
        assert got == expected.resolutions, (got, expected.resolutions)
        attempts = [(_effect_key(e), e["attempt"]) for e in effects]
        assert attempts == expected.effect_attempts, (attempts, expected.effect_attempts)
        assert [x["step"] for x in ledger] == expected.ledger_steps, (ledger, expected.ledger_steps)
    else:
        # Every safe side effect beyond the golden ones belongs to a visible replayed attempt.
        for e in effects:
            if e["tool"] not in never:
                assert e["result_id"] in intents, e
    return Verdict(duplicates, lost)


def _diff(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> str:
    lines = ["recovered log differs from the uninterrupted one:"]
    for i in range(max(len(got), len(want))):
        a = got[i] if i < len(got) else None
        b = want[i] if i < len(want) else None
        if a != b:
            lines.append(f"  [{i}] got  {a}\n  [{i}] want {b}")
    return "\n".join(lines)
