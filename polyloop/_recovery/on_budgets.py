"""The walker's handlers for checkpoint validity and retry budgets (log format 1.2).

A mixin of `polyloop._recovery.walker.Walker`: the records `checkpoint_accepted`,
`resumed` and `crash_loop_accepted`, the 1.2 fields of `run_started.config`
and the `tool_failures` finish, each checked against the numbered rules
21-24 of docs/reference/log-format.md. It also keeps the two budgets the
planner reads: resumes without progress (the crash loop) and each tool's
failures in a row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._log.records import CheckpointAccepted, CrashLoopAccepted, Intent, Record, Resumed, RunFinished, RunStarted

if TYPE_CHECKING:
    from .walker import _Step

# run_started.config keys a 1.1 writer never wrote.
CONFIG_1_2 = ("logic_version", "inputs", "config_hashes", "max_tool_failures", "max_resumes_without_progress")


@dataclass(frozen=True, slots=True)
class Budgets:
    """How much of its retry budgets a run has spent (log format 1.2; all unlimited before).

    Attributes:
        resumes: `resumed` records in the log.
        idle_resumes: resumes since the last completed step (or since an
            operator lifted a crash loop): the crash-loop count.
        max_resumes: the crash-loop budget recorded at the start (None: none).
        streaks: per tool, its error observations in a row (0 after a success).
        limits: per tool, its failure budget (tools without one absent).
        exhausted: `(tool, failures)` once a tool spent its budget (the run ends).
    """

    resumes: int = 0
    idle_resumes: int = 0
    max_resumes: int | None = None
    streaks: dict[str, int] = field(default_factory=dict)
    limits: dict[str, int] = field(default_factory=dict)
    exhausted: tuple[str, int] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "crash_loop": {"resumes": self.resumes, "without_progress": self.idle_resumes, "limit": self.max_resumes},
            "tool_failures": [
                {"tool": t, "in_a_row": self.streaks.get(t, 0), "limit": self.limits.get(t)}
                for t in sorted(set(self.streaks) | set(self.limits))
            ],
        }


def _positive(value: Any) -> bool:
    return type(value) is int and value >= 1


def check_config_1_2(config: dict[str, Any], minor: int) -> tuple[int, str] | None:
    """Why the 1.2 fields of a recorded config are not ones a writer makes (None: they are)."""
    tools = config.get("tools") if isinstance(config.get("tools"), list) else []
    present = [k for k in CONFIG_1_2 if k in config]
    present += [f"tools[{t['name']!r}].max_failures" for t in tools if "max_failures" in t]
    if minor < 2:
        return (21, f"config.{present[0]} in a log of format 1.{minor}, which has no such field") if present else None
    for key in ("max_tool_failures", "max_resumes_without_progress"):
        if config.get(key) is not None and not _positive(config[key]):
            return 14, f"config.{key} is {config[key]!r}, not a positive integer"
    for t in tools:
        if t.get("max_failures") is not None and not _positive(t["max_failures"]):
            return 14, f"config.tools[{t['name']!r}].max_failures is not a positive integer"
    version = config.get("logic_version")
    if version is not None and not isinstance(version, str):
        return 14, "config.logic_version is not a string"
    hashes = config.get("config_hashes", {})
    if not (isinstance(hashes, dict) and all(isinstance(v, str) for v in hashes.values())):
        return 14, "config.config_hashes is not an object of hashes"
    inputs = config.get("inputs", {})
    if not (isinstance(inputs, dict) and all(
        isinstance(fp, dict) and isinstance(fp.get("sha256"), str) for fp in inputs.values()
    )):
        return 14, "config.inputs is not an object of {kind, path, sha256}"
    return None


class BudgetHandlers:
    """Handlers of the 1.2 records; mixed into `Walker`, whose state they read and file into."""

    # Provided by Walker.
    minor: int
    steps: list[_Step]
    completed_steps: int

    def _init_budgets(self) -> None:
        self.live = False  # the run loop's own walker: the crash-loop stop is a resume's decision
        self.accepted: list[CheckpointAccepted] = []
        self.overrides: list[CheckpointAccepted | CrashLoopAccepted] = []
        self.resumes = 0
        self.idle_resumes = 0
        self.max_resumes: int | None = None
        self.streaks: dict[str, int] = {}
        self.limits: dict[str, int] = {}
        self.exhausted: tuple[str, int] | None = None
        self._default_limit: int | None = None

    def _budgets_from(self, rec: RunStarted) -> tuple[int, str] | None:
        config = rec.config
        bad = check_config_1_2(config, self.minor)
        if bad is not None:
            return bad
        self.max_resumes = config.get("max_resumes_without_progress")
        default = config.get("max_tool_failures")
        for t in config.get("tools") or []:
            limit = t.get("max_failures") or default
            if limit is not None:
                self.limits[t["name"]] = limit
        self._default_limit = default
        return None

    @property
    def budgets(self) -> Budgets:
        return Budgets(
            self.resumes, self.idle_resumes, self.max_resumes, dict(self.streaks), dict(self.limits), self.exhausted
        )

    def _new_in_1_2(self, rec: Record) -> tuple[int, str] | None:
        if self.minor < 2:
            return 21, f"{rec.TAG} in a log of format 1.{self.minor}, which has no such record"
        return None

    def _checkpoint_accepted(self, rec: CheckpointAccepted, index: int) -> tuple[int, str] | None:
        bad = self._new_in_1_2(rec)
        if bad is not None:
            return bad
        if not rec.differences:
            return 22, "checkpoint_accepted accepts no difference"
        if not rec.reason.strip() or not rec.by:
            return 22, "checkpoint_accepted without a reason or without who accepted"
        self.accepted.append(rec)
        self.overrides.append(rec)
        return None

    def _resumed(self, rec: Resumed, index: int) -> tuple[int, str] | None:
        bad = self._new_in_1_2(rec)
        if bad is not None:
            return bad
        if self.max_resumes is not None and self.idle_resumes >= self.max_resumes:
            return 23, (
                f"a resume after {self.idle_resumes} resumes without progress (the crash-loop budget is "
                f"{self.max_resumes}) and no crash_loop_accepted"
            )
        self.resumes += 1
        self.idle_resumes += 1
        return None

    def _crash_loop_accepted(self, rec: CrashLoopAccepted, index: int) -> tuple[int, str] | None:
        bad = self._new_in_1_2(rec)
        if bad is not None:
            return bad
        if self.max_resumes is None or self.idle_resumes < self.max_resumes:
            return 23, "crash_loop_accepted while the run is not in a crash loop"
        if rec.resumes != self.idle_resumes:
            return 23, f"crash_loop_accepted lifts {rec.resumes} resumes, the log has {self.idle_resumes}"
        if not rec.reason.strip() or not rec.by:
            return 23, "crash_loop_accepted without a reason or without who accepted"
        self.idle_resumes = 0
        self.overrides.append(rec)
        return None

    def _step_done(self, st: _Step, is_error: bool) -> None:
        """A step completed: progress for the crash loop, and its tools' failure streaks
        (each call of a step of several counts for its own tool, in the calls' order)."""
        self.idle_resumes = 0
        done = st.completed
        if done is not None and done.calls is not None:
            # A step of several calls counts once per tool: a failure if every call of it
            # in the step failed, a success (the streak ends) if any succeeded.
            failed: dict[str, bool] = {}
            for c in done.calls:
                failed[c["tool"]] = failed.get(c["tool"], True) and c["is_error"]
            for name, all_failed in failed.items():
                self._streak(name, all_failed)
            return
        out = st.output.output if st.output is not None else None
        call = out.get("tool_call") if out else None
        if call is None:
            return
        self._streak(call["name"], is_error)

    def _streak(self, name: str, is_error: bool) -> None:
        if not is_error:
            if name in self.streaks:
                self.streaks[name] = 0
            return
        n = self.streaks[name] = self.streaks.get(name, 0) + 1
        limit = self.limits.get(name, self._default_limit)
        if limit is not None and n >= limit:
            self.exhausted = (name, n)

    def _budget_intent(self, rec: Intent) -> tuple[int, str] | None:
        if self.exhausted is not None:
            tool, n = self.exhausted
            return 24, f"intent for step {rec.step} after {tool} failed {n} times in a row, its budget"
        return None

    def _budget_finish(self, rec: RunFinished) -> tuple[int, str] | None:
        if rec.reason == "tool_failures":
            if self.minor < 2:
                return 21, f"run_finished says tool_failures in a log of format 1.{self.minor}"
            if self.exhausted is None:
                return 24, "run_finished says tool_failures, but no tool spent its failure budget"
        elif self.exhausted is not None:
            return 24, f"run_finished says {rec.reason} after {self.exhausted[0]} spent its failure budget"
        return None
