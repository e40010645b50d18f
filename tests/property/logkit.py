"""Generators of run logs and an independent oracle for what a valid log means.

`simulate()` — as the Hypothesis strategy `runs()`, or driven by a seeded
`RandomDraw` for bulk fuzzing — plays a correct writer through every path
the run loop can take: failed and lost model calls, replayed `safe`
actions, `never` actions settled by an operator either way, unknown tools,
step budgets, errors. It returns the whole record sequence; any prefix of
it is a log a crash can leave behind. `oracle()` classifies a valid log by the rules of
SPEC §3 written out plainly, without the library's classifier.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import orjson
from hypothesis import strategies as st

from polyloop import (
    ActionResult,
    Intent,
    ModelCallResult,
    Resolution,
    RunFinished,
    RunStarted,
    StepCompleted,
)
from polyloop._log.ids import idempotency_key
from polyloop._log.records import encode

TOOLS = {"read": "safe", "grep": "safe", "write": "never", "send": "never"}

texts = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12
)
names = st.text(alphabet="abcxyz019 .-\\\"\n\u2028é✓", max_size=6)
usages = st.none() | st.fixed_dictionaries(
    {"input_tokens": st.integers(0, 10**6), "output_tokens": st.integers(0, 10**6)}
)


class _Draw:
    """Choices made by Hypothesis (shrinkable)."""

    def __init__(self, draw: st.DrawFn) -> None:
        self.draw = draw

    def pick(self, options: list[Any]) -> Any:
        return self.draw(st.sampled_from(options))

    def int(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, hi))

    def text(self) -> str:
        return self.draw(texts)

    def name(self) -> str:
        return self.draw(names)

    def usage(self) -> Any:
        return self.draw(usages)

    def run_id(self) -> str:
        return self.draw(st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,15}", fullmatch=True))


class RandomDraw:
    """The same choices from a seeded `random.Random` (for bulk fuzzing)."""

    def __init__(self, rnd: random.Random) -> None:
        self.rnd = rnd

    def pick(self, options: list[Any]) -> Any:
        return self.rnd.choice(options)

    def int(self, lo: int, hi: int) -> int:
        return self.rnd.randint(lo, hi)

    def text(self) -> str:
        return "".join(self.rnd.choice("ab z\"\\\n\t\x1b[31m\u202eé✓\U0001f600") for _ in range(self.rnd.randrange(8)))

    def name(self) -> str:
        return self.text()[:6]

    def usage(self) -> Any:
        if self.rnd.random() < 0.3:
            return None
        return {"input_tokens": self.rnd.randrange(10**6), "output_tokens": self.rnd.randrange(10**6)}

    def run_id(self) -> str:
        return "".join(self.rnd.choice("abcXYZ019_-.") for _ in range(self.rnd.randint(1, 12))).lstrip(".-") or "r"


def simulate(d: Any, run_id: str | None = None) -> list[Any]:
    """The whole record sequence of one run by a correct writer (finished or not), of run
    `run_id` (else a drawn one): its idempotency keys are derived from it."""
    drawn = d.run_id()
    run_id = run_id or drawn
    max_steps = 6 - d.int(1, 5)  # Hypothesis favours small numbers; favour long runs
    records: list[Any] = [
        RunStarted(
            run_id=run_id,
            goal=d.text(),
            target=d.pick([None, "agent.py:agent"]),
            config={"max_steps": max_steps, "system": None, "tools": [
                {"name": n, "replay": r} for n, r in TOOLS.items()]},
        )
    ]
    step = 0
    while True:
        step += 1
        if step > max_steps:
            records.append(RunFinished(reason="max_steps", result=None, steps=step - 1))
            return records
        output = None
        attempt = 0
        while output is None:
            attempt += 1
            rid = f"s{step}-m{attempt}"
            records.append(Intent(kind="model_call", step=step, attempt=attempt, result_id=rid))
            fate = d.pick(["ok", "ok", "ok", "error", "lost"]) if attempt < 4 else "ok"
            if fate == "lost":
                continue  # the process died during the call: a later attempt supersedes it
            if fate == "error":
                records.append(ModelCallResult(result_id=rid, output=None, error=d.text() or "boom",
                                               usage=d.usage()))
                if d.int(0, 3) == 0:
                    records.append(RunFinished(reason="error", result=None, steps=step - 1,
                                               error="the model call failed"))
                    return records
                continue
            kind = d.pick(["tool", "tool", "final", "unknown_tool", "several"])
            if kind == "final":
                output = {"text": d.text(), "tool_call": None}
            elif kind == "several":  # log format 1.2: every call of the answer runs
                calls = [{"name": d.pick(sorted(TOOLS) + ["nonexistent"]), "args": {"name": d.name()}}
                         for _ in range(d.int(2, 3))]
                output = {"text": None, "tool_call": calls[0], "tool_calls": calls}
            else:
                tool = d.pick(sorted(TOOLS)) if kind == "tool" else "nonexistent"
                output = {"text": d.pick([None, d.text()]),
                          "tool_call": {"name": tool, "args": {"name": d.name()}}}
            records.append(ModelCallResult(result_id=rid, output=output, usage=d.usage()))
        call = output["tool_call"]
        if "tool_calls" in output:
            done = _several(d, records, step, output["tool_calls"])
            if done is not None:
                return done
            continue
        if call is None:
            records.append(StepCompleted(step=step, result_id=None, observation=None))
            records.append(RunFinished(reason="final_answer", result=output["text"], steps=step))
            return records
        if call["name"] not in TOOLS:
            records.append(StepCompleted(step=step, result_id=None, is_error=True,
                                         observation=f"error: unknown tool {call['name']!r}"))
            continue
        replay = TOOLS[call["name"]]
        attempt = 0
        while True:
            attempt += 1
            rid = f"s{step}-a{attempt}"
            records.append(Intent(kind="action", step=step, attempt=attempt, result_id=rid,
                                  tool=call["name"], args=call["args"], replay=replay,
                                  idempotency_key=idempotency_key(run_id, step, call["name"], call["args"])))
            choices = ["done", "done", "lost"] if replay == "safe" else ["done", "done", "executed", "not_executed"]
            fate = d.pick(choices) if attempt < 4 else "done"
            if fate == "lost":
                continue  # unknown safe action: replayed as the next attempt
            if fate == "not_executed":
                records.append(Resolution(result_id=rid, outcome="not_executed", by="op", reason=d.text()))
                continue
            observation = d.text()
            if fate == "executed":
                records.append(Resolution(result_id=rid, outcome="executed", observation=observation, by="op"))
            records.append(StepCompleted(step=step, result_id=rid, observation=observation,
                                         is_error=d.pick([False, True])))
            break


def _several(d: Any, records: list[Any], step: int, calls: list[dict[str, Any]]) -> list[Any] | None:
    """The records of a step of several tool calls, as a correct writer makes them; returns
    `records` when the process died for good inside the step (the log ends there), else None."""
    run_id = records[0].run_id
    latest: dict[int, int] = {}  # call -> its latest attempt
    outcomes: dict[int, dict[str, Any]] = {}
    for k, c in enumerate(calls, start=1):
        if c["name"] not in TOOLS:
            outcomes[k] = {"result_id": None, "tool": c["name"], "observation": "error: unknown tool",
                           "is_error": True}
    pending = [k for k in range(1, len(calls) + 1) if k not in outcomes]
    while pending:
        # The intents of every call still to run, written together, then the calls' fates.
        for k in pending:
            latest[k] = latest.get(k, 0) + 1
            c = calls[k - 1]
            records.append(Intent(kind="action", step=step, attempt=latest[k], result_id=f"s{step}-c{k}-a{latest[k]}",
                                  tool=c["name"], args=c["args"], replay=TOOLS[c["name"]],
                                  idempotency_key=idempotency_key(run_id, step, c["name"], c["args"], k), call=k))
        again = []
        for k in pending:
            rid = f"s{step}-c{k}-a{latest[k]}"
            safe = TOOLS[calls[k - 1]["name"]] == "safe"
            choices = ["done", "done", "lost"] if safe else ["done", "done", "executed", "not_executed", "stop"]
            fate = d.pick(choices) if latest[k] < 4 else "done"
            if fate == "stop":
                return records  # the log ends with this `never` call unknown
            if fate == "lost" or fate == "not_executed":
                if fate == "not_executed":
                    records.append(Resolution(result_id=rid, outcome="not_executed", by="op", reason=d.text()))
                again.append(k)
                continue
            observation = d.text()
            if fate == "executed":
                records.append(Resolution(result_id=rid, outcome="executed", observation=observation, by="op"))
            else:
                records.append(ActionResult(result_id=rid, observation=observation))
            outcomes[k] = {"result_id": rid, "tool": calls[k - 1]["name"], "observation": observation,
                           "is_error": False}
        pending = again
    records.append(StepCompleted(step=step, result_id=None, observation=None,
                                 calls=[outcomes[k] for k in range(1, len(calls) + 1)]))
    return None


@st.composite
def runs(draw: st.DrawFn) -> list[Any]:
    """The whole record sequence of one run by a correct writer (finished or not)."""
    return simulate(_Draw(draw))


@st.composite
def logs(draw: st.DrawFn) -> list[Any]:
    """A log a correct writer can leave: some non-empty prefix of a run."""
    records = draw(runs())
    if draw(st.booleans()):
        return records[: draw(st.integers(1, len(records)))]
    return records[: len(records) - draw(st.integers(0, len(records) - 1))]


def to_bytes(records: list[Any]) -> bytes:
    return b"".join(encode(r) for r in records)


@dataclass(frozen=True)
class Expected:
    status: str
    states: dict[str, str]  # result id -> done / unknown / superseded / resolved
    blocking: list[str]
    completed_steps: int


def oracle(records: list[Any]) -> Expected:
    """How a valid log must be classified (SPEC §3), written out independently."""
    intents = [r for r in records if isinstance(r, Intent)]
    with_result = {r.result_id for r in records if isinstance(r, ModelCallResult | StepCompleted | ActionResult)}
    resolved = {r.result_id for r in records if isinstance(r, Resolution)}
    states = {}
    for i, it in enumerate(intents):
        if it.result_id in resolved:
            states[it.result_id] = "resolved"
        elif it.result_id in with_result:
            states[it.result_id] = "done"
        elif any((o.step, o.kind, o.call) == (it.step, it.kind, it.call) for o in intents[i + 1 :]):
            states[it.result_id] = "superseded"
        else:
            states[it.result_id] = "unknown"
    blocking = [it.result_id for it in intents
                if states[it.result_id] == "unknown" and it.kind == "action" and it.replay == "never"]
    if isinstance(records[-1], RunFinished):
        status = "finished"
    elif blocking:
        status = "needs_operator"
    else:
        status = "resumable"
    completed = sum(isinstance(r, StepCompleted) for r in records)
    # Only the open step's calls can wait for a person; one with an outcome by now does not.
    blocking = [b for b in blocking if int(b[1:].split("-")[0]) == completed + 1]
    if blocking and not isinstance(records[-1], RunFinished):
        status = "needs_operator"
    return Expected(status, states, blocking, completed)


# -- mutations that a correct writer can never produce --------------------------------------

MUTATIONS = ["garble", "cut", "flip", "invalid", "duplicate", "drop_intent", "swap_next"]

_INVALID = [
    b"[1, 2]",
    b"42",
    b'"a string"',
    b"null",
    b"{}",
    b'{"record": "no_such_kind"}',
    b'{"record": 7}',
]


def mutate(lines: list[bytes], kind: str, rnd: random.Random) -> list[bytes] | None:
    """Apply one mutation of `kind` to a middle line; None if it does not apply to this log.

    Every mutation here yields a log no correct writer can produce, and the
    readers must say so: an undecodable or invalid line followed by a
    decodable one, a repeated record, a missing intent, two records out of
    order. (A changed text inside a valid record is not among them: without
    checksums it is another valid log, and no reader can tell.)
    """
    n = len(lines)
    if n < 2:
        return None
    i = rnd.randrange(0, n - 1)  # there is always a decodable line after it
    line = lines[i].rstrip(b"\n")
    out = list(lines)
    if kind == "garble":
        junk = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 40)))
        if not junk.strip() or _decodes(junk) or b"\n" in junk:
            junk = b"\x00garbage\xff"
        out[i] = junk + b"\n"
    elif kind == "cut":
        out[i] = line[: rnd.randrange(1, len(line))] + b"\n"
    elif kind == "flip":
        for _ in range(20):
            j = rnd.randrange(len(line))
            b = bytes([rnd.randrange(256)])
            cand = line[:j] + b + line[j + 1 :]
            if b != b"\n" and cand.strip() and not _decodes(cand):
                out[i] = cand + b"\n"
                break
        else:
            return None
    elif kind == "invalid":
        obj = orjson.loads(line)
        choice = rnd.randrange(len(_INVALID) + 3)
        if choice < len(_INVALID):
            out[i] = _INVALID[choice] + b"\n"
        else:
            key = rnd.choice(sorted(k for k in obj if k != "record") or ["record"])
            if choice == len(_INVALID):
                del obj[key]  # a required field is missing (or the tag)
                if obj.get("record") and key in _optional(obj["record"]):
                    return None
            elif choice == len(_INVALID) + 1:
                obj[key] = [obj[key]]  # a field of the wrong type
            else:
                obj["record"] = "intent" if obj["record"] != "intent" else "resolution"
                if _decodes_as_record(obj):
                    return None
            out[i] = orjson.dumps(obj) + b"\n"
    elif kind == "duplicate":
        out.insert(rnd.randrange(i + 1, n + 1), lines[i])
    elif kind == "drop_intent":
        # Not an intent of one of a step's several calls: a call refused before any intent
        # (arguments that do not fit its tool) leaves exactly that gap.
        intents = [k for k in range(n - 1) if orjson.loads(lines[k]).get("record") == "intent"
                   and "call" not in orjson.loads(lines[k])]
        if not intents:
            return None
        del out[rnd.choice(intents)]
    elif kind == "swap_next":
        if _of_a_call(lines[i]) and _of_a_call(lines[i + 1]):
            return None  # the calls of a step run concurrently: their records come in any order
        out[i], out[i + 1] = out[i + 1], out[i]
    else:
        raise ValueError(kind)
    return out


def _of_a_call(line: bytes) -> bool:
    """A record about one of a step's several tool calls (an intent, result or resolution)."""
    obj = orjson.loads(line)
    return "call" in obj or "-c" in str(obj.get("result_id") or "")


def _decodes(data: bytes) -> bool:
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    return True


def _optional(tag: str) -> set[str]:
    from polyloop._log.decode import _OPTIONAL
    from polyloop._log.records import _BY_TAG

    cls = _BY_TAG.get(tag)
    return set(_OPTIONAL.get(cls, ())) if cls else set()


def _decodes_as_record(obj: dict) -> bool:
    from polyloop._log.decode import decode
    from polyloop._log.records import RecordError

    try:
        decode(obj)
    except RecordError:
        return False
    return True
