"""The errors PolyLoop raises, one class per meaning.

    PolyLoopError
    ├── InvalidRunIdError      the run id is not a safe file name
    ├── InvalidInputError      an argument a run would record cannot be recorded (before any write)
    ├── RecordError            a JSON object that is not a valid record of a known kind
    ├── RunNotFoundError       no log exists for the run id
    ├── RunExistsError         a log already exists where a new run was asked for
    ├── RunActiveError         another live process holds the run
    ├── RunMismatchError       resume was asked with other inputs (goal, budget, tools) than recorded
    ├── TargetError            an agent target could not be imported
    ├── CorruptLogError        the log cannot come from a correct writer
    │   └── SchemaVersionError the log was written by an unknown major format (also a RecordError)
    ├── NeedsOperatorError     an unknown `never` execution must be settled first
    │   ├── AlertError         a failed verification no rollback undid must be settled first
    │   ├── ApprovalRequiredError  a tool call waits for a person's approval or answer
    │   └── CrashLoopError     the run was resumed too often without progress (log format 1.2)
    ├── CheckpointError        the checkpoint is no longer valid (an input, the logic, a product): exit 4
    ├── ArtifactError          a product a tool reads is missing or not what the run recorded
    ├── ResolutionError        mark-resolved named something that waits for nobody
    ├── DecisionError          approve/deny/answer refused: no such open request, or a mismatch
    ├── ModelCallError         a step's model call failed; the run stopped, resumable
    ├── TransientModelError    raised by models: a failure worth a new attempt (429, timeout)
    │   └── MalformedResponseError  (polyloop.openai) an answer that cannot be read
    ├── ModelRefusedError      raised by models: refused for good (401, 400, 404); the run ends
    ├── ModelUnavailableError  the endpoint stayed down past the retry budget; stopped, resumable: exit 5
    ├── StoreError             the store could not write or read (fail closed)
    └── StoreUrlError          a store spec is a URL of a scheme PolyLoop does not serve (before any write)

Every message says what happened and, where there is one, what to do next.
Tool failures are not errors: they become observations the model sees.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import commands
from .names import execution_name

if TYPE_CHECKING:
    from .model_port import Usage


class PolyLoopError(Exception):
    """Base class of every error PolyLoop raises on purpose."""


class InvalidRunIdError(PolyLoopError, ValueError):
    """The run id is not a safe file name (`[A-Za-z0-9._-]+`, no leading dot or dash).

    Unsafe ids are rejected, never escaped or hashed, so `../x` can never
    address a file outside the run directory. A leading `-` is refused too:
    every command printed for such a run would read as an option.
    """

    def __init__(self, run_id: object) -> None:
        self.run_id = run_id
        super().__init__(
            f"invalid run id {run_id!r}: use letters, digits, '.', '_' and '-' "
            "only, not starting with '.' or '-'"
        )


class InvalidInputError(PolyLoopError, ValueError):
    """A value a run would record is unusable; refused before anything is written.

    Differs from `RecordError` (a record read back from a log is invalid):
    this is caught on the way in, so no log, lock or temporary file exists
    afterwards. Example: a step budget beyond what the log format can hold.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)


class RecordError(PolyLoopError, ValueError):
    """A JSON object that is not a valid record of a known kind.

    Raised by `decode_record`; a store that meets one in a log reports the
    log as corrupt (`CorruptLogError`).
    """


class RunNotFoundError(PolyLoopError, LookupError):
    """No log exists for this run id in the store.

    `detail` says what the store knows of the id all the same (a run queued
    on PostgreSQL that no worker has started yet has no log).
    """

    def __init__(self, run_id: str, where: str = "", *, detail: str | None = None) -> None:
        self.run_id = run_id
        self.where = where
        self.detail = detail
        place = f" in {where}" if where else ""
        super().__init__(f"no run {run_id!r}{place}" + (f": {detail}" if detail else ""))


class RunExistsError(PolyLoopError):
    """A new run was asked for, but the run id already has a log.

    Differs from `RunActiveError`: the log exists, but nobody need hold it.
    Continue it with `polyloop resume` (or `Agent.run` with the same id).
    """

    def __init__(self, run_id: str, *, why: str | None = None) -> None:
        self.run_id = run_id
        super().__init__(
            f"run {run_id!r} already exists: {why}" if why else
            f"run {run_id!r} already exists: continue it with "
            f"`{commands.resume(run_id)}` or choose another run id"
        )


class RunActiveError(PolyLoopError):
    """Another live process (or task) holds the run, so it cannot be run now.

    The hold is an OS lock that is released when its holder exits or dies;
    retry once the holder is gone.
    """

    def __init__(self, run_id: str, holder: str | None = None) -> None:
        self.run_id = run_id
        self.holder = holder
        by = f" by {holder}" if holder else " by another process"
        super().__init__(
            f"run {run_id!r} is active: it is held{by}; wait for it to exit "
            "(or kill it) and try again"
        )


class RunMismatchError(PolyLoopError):
    """Resume was asked with inputs that differ from the ones the run recorded."""

    def __init__(self, run_id: str, field: str, recorded: Any, given: Any) -> None:
        self.run_id = run_id
        self.field = field
        self.recorded = recorded
        self.given = given
        super().__init__(
            f"run {run_id!r} was started with {field}={recorded!r}, not {given!r}: "
            "resume it without overriding, or start a new run id"
        )


class TargetError(PolyLoopError):
    """An agent target (`file.py:name` or `module:name`) could not be loaded."""

    def __init__(self, target: str, why: str) -> None:
        self.target = target
        self.why = why
        super().__init__(f"cannot load agent target {target!r}: {why}")


@dataclass(frozen=True, slots=True)
class Problem:
    """One reason a log is corrupt.

    `index` is the 0-based position of the offending record in the log (or
    None when the problem is about the log as a whole); `line` is its 1-based
    line number in the file when the store knows it; `rule` is the number of
    the invariant it breaks in docs/reference/log-format.md (None for a line
    that is not a record at all).
    """

    message: str
    index: int | None = None
    line: int | None = None
    rule: int | None = None

    def __str__(self) -> str:
        # The rule's number is what to look up in the log format reference.
        text = self.message if self.rule is None else f"{self.message} (rule {self.rule})"
        if self.line is not None:
            return f"line {self.line}: {text}"
        if self.index is not None:
            return f"record {self.index + 1}: {text}"
        return text


class CorruptLogError(PolyLoopError):
    """The log is in a state a correct writer cannot produce; nothing resumes it.

    PolyLoop never repairs such a log silently. `problems` lists every
    violation found. Torn tails (a last write cut off by a crash) are not
    corruption and never raise this.
    """

    def __init__(self, run_id: str | None, problems: Sequence[Problem]) -> None:
        self.run_id = run_id
        self.problems = tuple(problems)
        first = str(self.problems[0]) if self.problems else "unknown problem"
        more = f" (and {len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
        name = f"log of run {run_id!r}" if run_id else "log"
        super().__init__(
            f"{name} is corrupt: {first}{more}; it cannot be resumed "
            "(inspect it with `polyloop inspect`)"
        )


class SchemaVersionError(CorruptLogError, RecordError):
    """The log was written with a schema major version this reader does not know.

    Differs from plain corruption: the log may be fine for a newer PolyLoop.
    The one error for it, whichever store or reader meets it (`decode_record`
    raises it too, with `run_id` None).
    """

    def __init__(self, run_id: str | None, version: object) -> None:
        self.version = version
        super().__init__(
            run_id,
            [Problem(f"unsupported schema version {version!r}: upgrade polyloop to read it", index=0)],
        )


class NeedsOperatorError(PolyLoopError):
    """The run stopped at an unknown `never` execution that an operator must settle.

    The library cannot know whether such an action ran (PolyLoop promises
    detection, not atomicity), and replaying it could repeat a side effect.
    `executions` lists each one (tool, arguments, result id); settle each with
    `polyloop mark-resolved RUN RESULT_ID --executed` or `--not-executed`,
    then resume.
    """

    def __init__(self, run_id: str, executions: Sequence[Any]) -> None:
        self.run_id = run_id
        self.executions = tuple(executions)
        parts = [
            execution_name(e) if e.kind == "rollback" else f"{e.tool}({_short_args(e.args)}) result id {e.result_id}"
            for e in self.executions
        ]
        ids = self.executions[0].result_id if self.executions else "RESULT_ID"
        super().__init__(
            f"run {run_id!r} needs an operator: unknown outcome of "
            + "; ".join(parts)
            + f"; settle it with {_either(run_id, ids)}, then resume"
        )


class AlertError(NeedsOperatorError):
    """The run stopped at a failed verification that no rollback undid (log format 1.1).

    The tool's rollback kind is `alert`, it declares none, or the rollback
    itself failed: the bad state is left for a person to investigate.
    Settle it with `polyloop mark-resolved RUN RESULT_ID --executed` (the
    effect stands) or `--not-executed` (it has no effect), then resume.
    Differs from its base only in what stopped the run: the outcome is
    known, and wrong.
    """

    def __init__(self, run_id: str, executions: Sequence[Any]) -> None:
        NeedsOperatorError.__init__(self, run_id, executions)
        e = self.executions[0]
        ver = getattr(e, "verification", None)
        why = ver.reason if ver is not None and ver.reason else "it returned False"
        self.args = (
            f"run {run_id!r} needs an operator: the verification of {e.tool}({_short_args(e.args)}) "
            f"result id {e.result_id} failed ({why}) and nothing undid it; check the world, then "
            f"settle it with {_either(run_id, e.result_id)}, then resume",
        )


class ApprovalRequiredError(NeedsOperatorError):
    """The run stopped because tool calls wait for a person (log format 1.2).

    Each waiting call is recorded durably (an `approval_request`) before
    anything of it runs. `requests` lists them (`RequestView`s: `result_id`,
    `kind`, `tool`, `args`); `executions` is the same tuple. A request of
    kind `approval` is decided with `polyloop approve RUN ID --reason TEXT`
    or `polyloop deny RUN ID --reason TEXT`, one of kind `answer` (a question
    asked with `ask_human`) with `polyloop answer RUN ID TEXT`; then resume.
    Differs from its base: nothing is unknown, nothing ran; the run waits
    by design, not after a crash.
    """

    def __init__(self, run_id: str, requests: Sequence[Any]) -> None:
        NeedsOperatorError.__init__(self, run_id, requests)
        self.requests = self.executions
        parts = []
        for r in self.requests:
            if r.kind == "answer":
                parts.append(
                    f"{r.tool} ({r.result_id}) asks {_short_args(r.args.get('question', ''))}; answer with "
                    f"`{commands.answer(run_id, r.result_id)}`"
                )
            else:
                parts.append(
                    f"{r.tool}({_short_args(r.args)}) result id {r.result_id} needs approval; decide with "
                    f"`{commands.approve(run_id, r.result_id)}` or `polyloop deny ...`"
                )
        self.args = (f"run {run_id!r} waits for a person: " + "; ".join(parts) + ", then resume",)


class DecisionError(PolyLoopError):
    """approve, deny or answer was refused; nothing was written.

    The id names no request of the run, the request is already decided,
    the run does not wait for it (finished, or not yet there), the decision
    does not fit the request's kind (approve a question, answer an
    approval), the expected SHA-256 is not the request's, or edited
    arguments are not a JSON object. Differs from `ResolutionError`, its
    sibling for `mark-resolved`.
    """

    def __init__(self, run_id: str, request_id: str, why: str) -> None:
        self.run_id = run_id
        self.request_id = request_id
        self.why = why
        super().__init__(f"cannot decide {request_id!r} of run {run_id!r}: {why}")
class CrashLoopError(NeedsOperatorError):
    """The run was resumed its crash-loop budget of times without completing a step (log format 1.2).

    The process keeps dying at the same point (out of memory, a segfault in
    a tool), so resuming once more would most likely die there too. Nothing
    was written. A person looks at why, then lifts the stop on the record
    with `polyloop resume RUN --accept-crash-loop --reason TEXT` (Python:
    `accept_crash_loop=True, reason=...`). Differs from its base: nothing
    is unknown; the run itself is suspect.

    Attributes:
        resumes: resumes since the last completed step.
        limit: the budget recorded at the start (`max_resumes_without_progress`).
        step: the step it keeps dying in.
        tool: the tool of that step's latest action, if it has one.
    """

    def __init__(self, run_id: str, resumes: int, limit: int, step: int, tool: str | None = None) -> None:
        self.run_id = run_id
        self.executions = ()
        self.resumes = resumes
        self.limit = limit
        self.step = step
        self.tool = tool
        where = f"step {step}" + (f" ({tool})" if tool else "")
        PolyLoopError.__init__(
            self,
            f"run {run_id!r} is in a crash loop: resumed {resumes} times without completing a step "
            f"(its budget is {limit}); it keeps dying in {where}. Find out why, then lift the stop with "
            f"`{commands.accept_crash_loop(run_id)}`",
        )


class CheckpointError(PolyLoopError):
    """The run's checkpoint is no longer valid: resume refuses before anything runs (exit code 4).

    What the run depends on changed since it started (an input's hash, the
    logic version, the agent's configuration) or an intermediate product it
    referenced is missing or altered. `differences` lists each change as
    `{"what", "name", "recorded", "now"}`. The two ways forward: start over
    under a new run id, or accept the changes on the record
    (`polyloop resume RUN --accept-changes --reason TEXT`).
    """

    def __init__(self, run_id: str, message: str, differences: Sequence[Any] = ()) -> None:
        self.run_id = run_id
        self.differences = tuple(differences)
        super().__init__(message)


class ArtifactError(PolyLoopError):
    """A product a tool asked for (`ctx.artifacts.read`) is unknown, missing or altered.

    Raised inside the tool, so it becomes the tool's error observation like
    any exception a tool raises. Differs from `CheckpointError`, which
    refuses a whole resume before anything runs when a referenced product
    is missing or altered.

    Attributes:
        run_id: the run.
        name: the product's name.
    """

    def __init__(self, run_id: str, name: str, message: str) -> None:
        self.run_id = run_id
        self.name = name
        super().__init__(message)


class ResolutionError(PolyLoopError):
    """mark-resolved named an execution the run does not wait for (not an open unknown or alert)."""

    def __init__(self, run_id: str, result_id: str, why: str) -> None:
        self.run_id = run_id
        self.result_id = result_id
        self.why = why
        super().__init__(f"cannot resolve {result_id!r} of run {run_id!r}: {why}")


class TransientModelError(PolyLoopError):
    """Raised by a model for a failure worth retrying (rate limit, timeout, 5xx, overloaded).

    The run loop records the failed attempt and issues a new, visible attempt
    after a backoff (exponential with full jitter, shared by the runs on one
    endpoint: `polyloop._run.retry`), at least `retry_after` seconds when the
    server said so (capped at `Agent.retry_max_delay`). Past the run's retry
    budget the run stops resumable (`ModelUnavailableError`): a transient
    failure never ends a run.

    Args:
        message: what failed.
        retry_after: seconds the server asked to wait, if it did.
        usage: tokens the failed call still cost, if known (recorded).
    """

    def __init__(
        self, message: str, *, retry_after: float | None = None, usage: Usage | None = None
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.usage = usage


MAX_RETRY_AFTER = 60.0


class ModelCallError(PolyLoopError):
    """The model call of a step failed; the run stopped and stays resumable.

    The failed attempt is in the log. Fix the cause (server, key, script) and
    resume; after `max_attempts` failed attempts of one step the run ends
    with reason `error` instead.
    """

    def __init__(self, run_id: str, step: int, attempt: int, error: str) -> None:
        self.run_id = run_id
        self.step = step
        self.attempt = attempt
        self.error = error
        super().__init__(
            f"run {run_id!r}: the model call of step {step} (attempt {attempt}) failed: "
            f"{error}; the run is resumable once the cause is fixed"
        )


class StoreError(PolyLoopError):
    """The store failed to write or read; the run stops rather than go on blind.

    A write that raised this may or may not have landed; the log stays
    readable and the run resumable once the cause (full disk, permissions)
    is fixed.
    """

    def __init__(self, message: str, *, run_id: str | None = None) -> None:
        self.run_id = run_id
        super().__init__(message)


class StoreUrlError(PolyLoopError, ValueError):
    """A store spec looks like a URL (`scheme://`) of a scheme PolyLoop does not serve.

    Differs from `StoreError` (a store that exists failed): this is refused
    before any store is opened, so nothing (no folder named `mysql:`) is
    created. Stores are a directory or `postgresql://` (`postgres://`). The
    message names the scheme only: the rest of the URL may hold a password.
    """

    def __init__(self, scheme: str, *, message: str | None = None) -> None:
        self.scheme = scheme
        if message is None:
            hint = ""
            if scheme.lower().startswith("postgres") and "+" in scheme:
                hint = " (PolyLoop picks the driver itself: write postgresql://..., without the +driver)"
            elif scheme.lower() in ("postgresql", "postgres"):
                hint = " (libpq reads the scheme in lower case only: write postgresql://...)"
            message = (
                f"unsupported store {scheme}://...: give a directory or a PostgreSQL URL, "
                f"postgresql://... (or postgres://...){hint}; for a directory of that name, write ./NAME"
            )
        super().__init__(message)


def _either(run_id: str, result_id: str) -> str:
    return f"`{commands.mark_resolved(run_id, result_id, executed=True)}` or `--not-executed`"


def _short_args(args: Any, limit: int = 80) -> str:
    text = repr(args)
    return text if len(text) <= limit else text[: limit - 3] + "..."
