"""The walker's handler for product references (log format 1.2, docs/how-to/keep-intermediate-products.md).

The `artifact` record's handler, called by `polyloop._recovery.walker.Walker`,
checking rules 25-27 of docs/reference/log-format.md, and the references it
keeps (the latest per product name). What a product's bytes say is judged
elsewhere (`polyloop._run.artifacts.judge`): the walker is pure.
"""

from __future__ import annotations

from .._log.errors import InvalidInputError
from .._log.ids import check_artifact_name
from .._log.records import Artifact
from .state import WalkState


def artifact_path(run_id: str, name: str) -> str:
    """Where a product lives, relative to the store's run folder: `<run_id>.artifacts/<name>`."""
    return f"{run_id}.artifacts/{name}"


def apply_artifact(s: WalkState, rec: Artifact, index: int) -> tuple[int, str] | None:
    if s.minor < 2:
        return 25, f"an artifact record in a log of format 1.{s.minor}, which has no product references"
    x = s.by_id.get(rec.result_id)
    if x is None or x.intent.kind != "action":
        return 26, f"artifact {rec.name!r} names {rec.result_id}, which is no action intent"
    if x.intent.step != s.completed_steps + 1:
        return 26, f"artifact {rec.name!r} names {rec.result_id}, an action of a completed step"
    if x.result is not None or x.returned is not None or x.verdict is not None or (
        x.precondition is not None and not x.precondition.passed
    ):
        return 26, f"artifact {rec.name!r} names {rec.result_id}, an action that already has its outcome"
    try:
        check_artifact_name(rec.name)
    except InvalidInputError as exc:
        return 27, str(exc)
    run_id = s.started.run_id if s.started is not None else ""
    if rec.path != artifact_path(run_id, rec.name):
        return 27, f"artifact {rec.name!r} has path {rec.path!r}, not {artifact_path(run_id, rec.name)!r}"
    s.artifacts.pop(rec.name, None)  # a later write supersedes: keep the order of latest writes
    s.artifacts[rec.name] = rec
    return None
