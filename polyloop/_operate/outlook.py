"""What `polyloop resume` would do next, judged as resume judges it (log format 1.2).

The planner's move alone is not what resume does. Before anything runs,
resume refuses (exit code 4) a run whose referenced products are missing
or altered, whatever its move; then, unless the move is a stop for a person
(`polyloop._run.resume.compares_checkpoint`), a run whose inputs, logic version
or configuration changed. `outlook` says the same, in that order, with the
same refusal resume raises: `inspect`, and through it `approve`, `deny`,
`answer` and `mark-resolved`, print what it returns, so no command can say
"run the tool" while resume refuses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._run.artifacts import ArtifactCheck, artifact_checks, artifact_refusal, refused_artifacts
from .._recovery.walker import Walker
from .._log.errors import CheckpointError, PolyLoopError
from .._recovery.plan import Next, describe
from .._run.resume import compares_checkpoint
from .._log.store_port import Store
from .._run.target import load_target
from .._run.validity import differences, refusal


@dataclass(frozen=True, slots=True)
class Outlook:
    """What resume would do with a run now: the sentence, and what it is made of.

    Attributes:
        next: one sentence; for a refusal `refuse (exit code 4): ` and resume's own message.
        refusal: the `CheckpointError` resume would raise now, or None.
        validity: the checkpoint verdict (`RunReport.validity`), or None when not judged.
        artifacts: every product the run references, checked.
        bad: the missing or altered products no override accepted.
    """

    next: str
    refusal: CheckpointError | None = None
    validity: dict[str, Any] | None = None
    artifacts: tuple[ArtifactCheck, ...] = ()
    bad: tuple[ArtifactCheck, ...] = ()


async def outlook(store: Store, walker: Walker, planned: Next, *, stopped: bool, validity: bool) -> Outlook:
    """What resume would do with the walked log whose move is `planned`.

    `stopped`: the run is neither finished nor held by a live process (only
    then is the checkpoint judged). `validity`: also compare the inputs,
    logic version and configuration, which imports the recorded target and
    re-reads the recorded inputs (products are always checked).
    """
    assert walker.started is not None
    run_id = walker.started.run_id
    sentence = describe(planned, run_id)
    artifacts = tuple(await artifact_checks(store, walker))
    if not stopped:
        return Outlook(sentence, artifacts=artifacts)
    bad = tuple(refused_artifacts(artifacts, walker))
    verdict = checkpoint_verdict(walker) if validity else None
    refused = artifact_refusal(run_id, list(bad), store) if bad else None  # resume's first check
    if refused is None and verdict is not None and verdict["valid"] is False:
        changed = refusal(run_id, verdict["differences"])
        if compares_checkpoint(planned):
            refused = changed
        else:  # resume stops for the person first (exit code 3); the change refuses once settled
            sentence += f"; then resume refuses (exit code 4): {changed}"
    if refused is not None:
        sentence = f"refuse (exit code 4): {refused}"
    return Outlook(sentence, refused, verdict, artifacts, bad)


def checkpoint_verdict(walker: Walker) -> dict[str, Any]:
    """The checkpoint verdict of a stopped run (`RunReport.validity`), or why it was not checked."""
    started = walker.started
    assert started is not None
    if not started.target:
        return {"valid": None, "differences": [], "not_checked": "no target recorded (the run was started from Python)"}
    if started.config.get("loop") == "own":  # its target is an entry point that runs the loop: never called here
        return {"valid": None, "differences": [], "not_checked": "a run of a user's loop (polyloop.durable): its "
                "configuration is compared when its entry point opens it again (polyloop resume)"}
    try:
        agent = load_target(started.target)
        diffs = differences(started, walker.accepted, agent)
    except PolyLoopError as exc:
        return {"valid": None, "differences": [], "not_checked": str(exc)}
    except Exception as exc:  # the agent's own code (a model's describe()) failed
        return {"valid": None, "differences": [], "not_checked": f"{type(exc).__name__}: {exc}"}
    return {"valid": not diffs, "differences": diffs, "not_checked": None}
