"""The log records: one frozen class per record kind, and their JSON form.

A record is a permanent contract once written: fields are only ever added,
never removed or renamed. On disk each record is one JSON object whose
`record` key names its kind (`run_started`, `intent`, ...). Decoding is
strict about what it needs and ignores fields it does not know, so a log
written by a newer minor version still reads; an unknown *major* version is
refused (`SchemaVersionError`).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import time as _time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Union, get_args

import orjson

from .errors import RecordError, SchemaVersionError  # noqa: F401  (RecordError: readers import it with the records)

SCHEMA_VERSION = "1.4"
"""`major.minor` of the log format this library writes."""

SUPPORTED_MAJOR = 1

Kind = Literal["model_call", "action", "rollback"]
Replay = Literal["safe", "never"]
FinishReason = Literal["final_answer", "max_steps", "error", "tool_failures", "cancelled"]
StopCause = Literal["model_unavailable"]
Outcome = Literal["executed", "not_executed"]
Guard = Literal["precondition", "verify", "reconcile"]
RollbackKind = Literal["undo", "compensate", "alert"]
Source = Literal["operator", "reconcile"]
RequestKind = Literal["approval", "answer"]
DecisionKind = Literal["approved", "denied", "answered"]

# What a checkpoint difference (`CheckpointError.differences`, `checkpoint_accepted`) can name.
DIFFERENCE_KINDS = ("input", "logic_version", "config", "product")

_second: tuple[int, str] = (-1, "")


def utc_now() -> str:
    """The current time as an ISO 8601 UTC string with microseconds."""
    global _second
    micros = _time.time_ns() // 1000
    seconds = micros // 1_000_000
    cached = _second  # formatting the date once a second keeps four records a step cheap
    if cached[0] != seconds:
        stamp = _dt.datetime.fromtimestamp(seconds, _dt.timezone.utc)
        cached = _second = (seconds, stamp.strftime("%Y-%m-%dT%H:%M:%S."))
    # The microseconds, zero-padded to six digits: the digits of 1,000,000 + them after
    # the first (a third cheaper than a `:06d` format and a divmod; four records a step).
    return cached[1] + str(micros - seconds * 1_000_000 + 1_000_000)[1:] + "Z"


@dataclass(frozen=True, slots=True, kw_only=True)
class RunStarted:
    """First record of every run: what runs, with what configuration, towards what goal.

    `trace` (log format 1.4): the W3C `traceparent` of a traced run's first span; later processes continue its trace.
    """

    TAG: ClassVar[str] = "run_started"
    run_id: str
    goal: str
    target: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    schema_version: str = SCHEMA_VERSION
    trace: str | None = None
    at: str = field(default_factory=utc_now)


@dataclass(frozen=True, slots=True, kw_only=True)
class Intent:
    """Written and made durable before a model call or an action starts.

    `result_id` is where its result will be stored. For actions, `tool`,
    `args`, `replay` and `idempotency_key` are set; for model calls they are None.
    `call` (log format 1.2) numbers the tool call, from 1, in a step whose
    model output carries several; it is absent (None) otherwise.
    """

    TAG: ClassVar[str] = "intent"
    kind: Kind
    step: int
    attempt: int
    result_id: str
    tool: str | None = None
    args: dict[str, Any] | None = None
    replay: Replay | None = None
    idempotency_key: str | None = None
    call: int | None = None
    at: str = field(default_factory=utc_now)


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelCallResult:
    """The outcome of one model call attempt.

    `output` is `{"text": str | None, "tool_call": {"name", "args"} | None}`,
    plus `"tool_calls": [{"name", "args"}, ...]` when the model asked for
    several calls at once (`tool_call` is then the first); when the call failed, `output` is None and `error` says why.
    `usage` is `{"input_tokens": int, "output_tokens": int}` when known.
    `transient` (log format 1.3) is True on a failed attempt whose failure
    was transient (the endpoint was unreachable, slow, rate limited or
    overloaded): such failures spend the run's retry budget and stop it
    resumable (`run_stopped`), never end it; absent otherwise.
    """

    TAG: ClassVar[str] = "model_call_result"
    result_id: str
    output: dict[str, Any] | None
    usage: dict[str, Any] | None = None
    error: str | None = None
    transient: bool | None = None
    at: str = field(default_factory=utc_now)


@dataclass(frozen=True, slots=True, kw_only=True)
class StepCompleted:
    """A step ended. `result_id` names the action it ran (None when it ran none).

    `observation` is what the model sees next (None for a final answer);
    `is_error` marks an observation that reports a tool failure.
    A step of several tool calls (log format 1.2) has `result_id` and
    `observation` None and lists every call's outcome, in the calls' order,
    in `calls`: `[{"result_id", "tool", "observation", "is_error"}, ...]`
    (`result_id` None for a call that never got an intent: an unknown tool,
    arguments that do not fit its schema).
    """

    TAG: ClassVar[str] = "step_completed"
    step: int
    result_id: str | None
    observation: str | None
    is_error: bool = False
    calls: list[dict[str, Any]] | None = None
    at: str = field(default_factory=utc_now)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunFinished:
    """Last record of a run, written before the result is returned to the caller.

    `by` and `why` (log format 1.3) are set exactly when `reason` is
    `cancelled`: who cancelled the run and why (`polyloop cancel`).
    """

    TAG: ClassVar[str] = "run_finished"
    reason: FinishReason
    result: str | None
    steps: int
    error: str | None = None
    by: str | None = None
    why: str | None = None
    at: str = field(default_factory=utc_now)


@dataclass(frozen=True, slots=True, kw_only=True)
class Resolution:
    """A verdict on an unknown action, a failed verification or an unknown rollback.

    Written by an operator (`mark-resolved`, `source="operator"`) or, since
    log format 1.1, by the tool's own `reconcile` guard on resume
    (`source="reconcile"`, `by="reconcile"`).
    """

    TAG: ClassVar[str] = "resolution"
    result_id: str
    outcome: Outcome
    observation: str | None = None
    by: str = ""
    reason: str | None = None
    source: Source = "operator"
    at: str = field(default_factory=utc_now)


@dataclass(frozen=True, slots=True, kw_only=True)
class GuardCheck:
    """A guard's verdict on an action (log format 1.1).

    `guard` is `precondition` (checked after the intent, before the tool
    runs), `verify` (the target read back after the tool returned; a failed
    one is an alert, `rollback` names what the tool declared for it) or
    `reconcile` (only ever failed: the world could not tell, an operator must).
    """

    TAG: ClassVar[str] = "guard_check"
    result_id: str
    guard: Guard
    passed: bool
    reason: str | None = None
    rollback: RollbackKind | None = None
    at: str = field(default_factory=utc_now)


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionResult:
    """What a verified action's tool, or a rollback, returned (log format 1.1).

    The step is not done yet: a verification (or, for a rollback, the
    step's completion) follows.
    """

    TAG: ClassVar[str] = "action_result"
    result_id: str
    observation: str
    is_error: bool = False
    at: str = field(default_factory=utc_now)


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalRequest:
    """A tool call waits for a person, recorded before anything of it runs (log format 1.2).

    `kind` is `approval` (a tool that requires approval: `polyloop approve`
    or `deny` decides) or `answer` (the model asked a person a question with
    `ask_human`: `polyloop answer` decides). `result_id` is the id the
    action's first intent gets once approved (e.g. `s3-a1`); it is also the
    id the deciding commands take. `args_sha256` is the SHA-256 of the
    canonical JSON of `args` (`args_digest`). `reason` says why it waits.
    `call` numbers the tool call in a step of several (its id is then
    `s3-c2-a1`); absent otherwise.
    """

    TAG: ClassVar[str] = "approval_request"
    result_id: str
    step: int
    kind: RequestKind
    tool: str
    args: dict[str, Any]
    args_sha256: str
    idempotency_key: str
    reason: str | None = None
    call: int | None = None
    at: str = field(default_factory=utc_now)


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """A person's decision on an `approval_request` (log format 1.2).

    `id` names the request (its `result_id`) and `request_sha256` its
    `args_sha256`, so a decision can never settle another request.
    `args_sha256` is the hash of the exact arguments approved: the request's
    own, or of `args` when the approver edited them (then `args` holds the
    edited arguments, and only then). `answer` carries the text of an
    `answered` question.
    """

    TAG: ClassVar[str] = "decision"
    id: str
    decision: DecisionKind
    by: str
    request_sha256: str
    args_sha256: str
    reason: str | None = None
    args: dict[str, Any] | None = None
    answer: str | None = None
    at: str = field(default_factory=utc_now)


def args_digest(args: Any) -> str:
    """SHA-256 (hex) of `args` as canonical JSON: orjson with sorted keys."""
    return hashlib.sha256(orjson.dumps(args, option=orjson.OPT_SORT_KEYS)).hexdigest()


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointAccepted:
    """A person accepted changes to what the run depends on (log format 1.2, fsync'd).

    Written by `polyloop resume RUN --accept-changes --reason TEXT` before
    the run goes on. `differences` are exactly the ones accepted, each
    `{"what", "name", "recorded", "now"}` (`what` is `input`,
    `logic_version`, `config` or `product`); later resumes compare against
    their `now` values.
    """

    TAG: ClassVar[str] = "checkpoint_accepted"
    differences: list[dict[str, Any]]
    reason: str
    by: str
    at: str = field(default_factory=utc_now)


@dataclass(frozen=True, slots=True, kw_only=True)
class Resumed:
    """A resume went on to act on the run (log format 1.2, fsync'd).

    Counted for the crash-loop budget: `config.max_resumes_without_progress`
    of these with no step completed in between stop the next resume.
    `trace` (log format 1.4): the W3C `traceparent` of a traced resume's span.
    """

    TAG: ClassVar[str] = "resumed"
    by: str
    trace: str | None = None
    at: str = field(default_factory=utc_now)


@dataclass(frozen=True, slots=True, kw_only=True)
class CrashLoopAccepted:
    """A person lifted a crash-loop stop (log format 1.2, fsync'd).

    Written by `polyloop resume RUN --accept-crash-loop --reason TEXT`;
    `resumes` is how many resumes without progress it lifted. The count
    starts again from zero after it.
    """

    TAG: ClassVar[str] = "crash_loop_accepted"
    resumes: int
    reason: str
    by: str
    at: str = field(default_factory=utc_now)


@dataclass(frozen=True, slots=True, kw_only=True)
class Artifact:
    """A reference to an intermediate product a tool stored (log format 1.2).

    Appended after the product is durable (docs/how-to/keep-intermediate-products.md);
    the log holds the reference, never the content. `result_id` names the
    action that wrote it; `path` is `<run_id>.artifacts/<name>`, relative to
    the store's run folder. A later record for the same name supersedes it.
    """

    TAG: ClassVar[str] = "artifact"
    result_id: str
    name: str
    path: str
    size: int
    sha256: str
    at: str = field(default_factory=utc_now)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunStopped:
    """The run stopped, resumable: a dependency stayed unavailable (log format 1.3, fsync'd).

    Written when the model endpoint of `step` kept failing transiently
    (connection refused or reset, timeout, 429, 5xx, overloaded) past the
    run's retry budget; no `run_finished` follows, and `polyloop resume`
    tries again with a fresh budget. `attempts` is how many model call
    attempts of `step` failed transiently since the previous `run_stopped`
    (0 when the run only waited on an endpoint other runs of its process
    found down); `failures` how many calls to the endpoint had failed in a
    row when the run gave up, counting those of other runs that share it;
    `since` when that streak began; `error` the last failure in the
    provider's words; `endpoint` the provider and its URL without any
    password (None for a model that names no endpoint).
    """

    TAG: ClassVar[str] = "run_stopped"
    cause: StopCause
    step: int
    attempts: int
    failures: int
    error: str
    since: str
    endpoint: str | None = None
    at: str = field(default_factory=utc_now)


Record = Union[
    RunStarted,
    Intent,
    ModelCallResult,
    StepCompleted,
    RunFinished,
    Resolution,
    GuardCheck,
    ActionResult,
    ApprovalRequest,
    Decision,
    CheckpointAccepted,
    Resumed,
    CrashLoopAccepted,
    Artifact,
    RunStopped,
]
RECORD_TYPES: tuple[type, ...] = get_args(Record)  # every record class, in the order above
# Records a 1.0 writer never wrote.
NEW_IN_1_1: tuple[type, ...] = (GuardCheck, ActionResult)
# Records a 1.0 or 1.1 writer never wrote.
NEW_IN_1_2: tuple[type, ...] = (
    ApprovalRequest, Decision, CheckpointAccepted, Resumed, CrashLoopAccepted, Artifact,
)
# Records a writer before 1.3 never wrote.
NEW_IN_1_3: tuple[type, ...] = (RunStopped,)  # 1.4 adds no kind: the optional `trace` of two
_BY_TAG: dict[str, type] = {cls.TAG: cls for cls in RECORD_TYPES}

# The durability rule, written once (docs/reference/stores.md): True when a store must make the
# record, and every earlier record of its run, survive a machine crash before the write returns;
# False when surviving a process crash is enough (the run's next durable write flushes it: prefix
# durability). A new record kind adds its row here.
DURABLE: dict[type, bool] = {
    RunStarted: True, Intent: True, ModelCallResult: False, StepCompleted: False, RunFinished: True,
    Resolution: True, GuardCheck: True, ActionResult: False, ApprovalRequest: True, Decision: True,
    CheckpointAccepted: True, Resumed: True, CrashLoopAccepted: True, Artifact: False, RunStopped: True,
}
assert set(DURABLE) == set(RECORD_TYPES), "every record kind has its row in DURABLE"


# One error tree (polyloop._log.errors): an unknown major version is the same
# `SchemaVersionError` whichever reader meets it.
UnknownSchemaError = SchemaVersionError


def encode(record: Record) -> bytes:
    """One record as one JSON line, `record` key first, newline-terminated.

    Public as `polyloop.encode_record`: a store that keeps records elsewhere
    than in JSONL files stores these bytes (or their JSON) as they are.
    Text that UTF-8 cannot carry (a lone surrogate) is written as described
    by `representable`.
    """
    try:
        obj = _AS_DICT[type(record)](record)
    except KeyError:
        raise TypeError(f"not a log record: {type(record).__name__}") from None
    try:
        return orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:  # orjson's word for text UTF-8 cannot carry, among others
        return orjson.dumps(representable(obj), option=orjson.OPT_APPEND_NEWLINE)


def representable(value: Any) -> Any:
    """`value` with every lone surrogate written as the six characters `\\udXXX`.

    Text from tools and models is data, and some of it is not valid Unicode:
    `os.listdir` returns a file name whose bytes are not UTF-8 with lone
    surrogates (`\\udcff` for the byte 0xff). UTF-8, and so the log, cannot
    carry them; they are written as that visible escape instead (see
    docs/reference/log-format.md), so the run goes on and a reader sees
    which bytes were there. Everything else is returned unchanged.
    """
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {representable(k): representable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [representable(v) for v in value]
    return value


# Fields written only when set (1.2 additions that most records do not
# need), so the records of a step with one tool call read as they always did.
_OMIT_NONE: dict[type, frozenset[str]] = {
    Intent: frozenset({"call"}),
    ModelCallResult: frozenset({"transient"}),
    StepCompleted: frozenset({"calls"}),
    ApprovalRequest: frozenset({"call"}),
    RunFinished: frozenset({"by", "why"}),
    RunStarted: frozenset({"trace"}), Resumed: frozenset({"trace"}),  # 1.4: only traced runs have one
}


def _compile_as_dict(cls: type) -> Callable[[Any], dict[str, Any]]:
    """The function that turns a record of `cls` into the dict `encode` writes, compiled once.

    `record` first, then every field in the class's order, leaving out the
    fields of `_OMIT_NONE` that are None: the same dict a loop over the
    fields builds, without a `getattr` per field (four records a step;
    docs/performance.md). Generated from the class's own field names, as
    `dataclasses` generates `__init__`.
    """
    omit = _OMIT_NONE.get(cls, frozenset())
    body = [f"    d = {{'record': {cls.TAG!r}"]
    literal = True  # the fields before the first that may be left out go in one dict display
    for name in cls.__slots__:  # type: ignore[attr-defined]
        if name in omit:
            if literal:
                body[-1] += "}"
                literal = False
            body.append(f"    if r.{name} is not None: d[{name!r}] = r.{name}")
        elif literal:
            body[-1] += f", {name!r}: r.{name}"
        else:
            body.append(f"    d[{name!r}] = r.{name}")
    if literal:
        body[-1] += "}"
    namespace: dict[str, Any] = {}
    exec("\n".join([f"def {cls.__name__}_as_dict(r):", *body, "    return d"]), namespace)
    return namespace[f"{cls.__name__}_as_dict"]  # type: ignore[no-any-return]


_AS_DICT: dict[type, Callable[[Any], dict[str, Any]]] = {cls: _compile_as_dict(cls) for cls in RECORD_TYPES}
