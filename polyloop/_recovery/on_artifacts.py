"""The walker's handler for product references (log format 1.2, docs/how-to/keep-intermediate-products.md).

A mixin of `polyloop._recovery.walker.Walker`: the `artifact` record's handler,
checking rules 25-27 of docs/reference/log-format.md, and the references it
keeps (the latest per product name). What a product's bytes say is judged
elsewhere (`polyloop._run.artifacts.judge`): the walker is pure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._log.ids import check_product_name
from .._log.errors import InvalidInputError
from .._log.records import Artifact, RunFinished, RunStarted

if TYPE_CHECKING:
    from .walker import _Exec, _Step


def product_path(run_id: str, name: str) -> str:
    """Where a product lives, relative to the store's run folder: `<run_id>.artifacts/<name>`."""
    return f"{run_id}.artifacts/{name}"


class ArtifactHandlers:
    """The `artifact` record's handler; mixed into `Walker`, whose state it reads."""

    # Provided by Walker.
    started: RunStarted | None
    finished: RunFinished | None
    minor: int
    completed_steps: int
    steps: list[_Step]
    _by_id: dict[str, _Exec]

    # The latest reference per product name, in the order names first appeared.
    artifacts: dict[str, Artifact]

    def _artifact(self, rec: Artifact, index: int) -> tuple[int, str] | None:
        if self.minor < 2:
            return 25, f"an artifact record in a log of format 1.{self.minor}, which has no product references"
        x = self._by_id.get(rec.result_id)
        if x is None or x.intent.kind != "action":
            return 26, f"artifact {rec.name!r} names {rec.result_id}, which is no action intent"
        if x.intent.step != self.completed_steps + 1:
            return 26, f"artifact {rec.name!r} names {rec.result_id}, an action of a completed step"
        if x.result is not None or x.returned is not None or x.verdict is not None or (
            x.precondition is not None and not x.precondition.passed
        ):
            return 26, f"artifact {rec.name!r} names {rec.result_id}, an action that already has its outcome"
        try:
            check_product_name(rec.name)
        except InvalidInputError as exc:
            return 27, str(exc)
        run_id = self.started.run_id if self.started is not None else ""
        if rec.path != product_path(run_id, rec.name):
            return 27, f"artifact {rec.name!r} has path {rec.path!r}, not {product_path(run_id, rec.name)!r}"
        self.artifacts.pop(rec.name, None)  # a later write supersedes: keep the order of latest writes
        self.artifacts[rec.name] = rec
        return None

    def in_flight(self) -> list[_Exec]:
        """Actions of the open step whose outcome the log does not hold: a crash may have cut them short.

        One of them may have replaced a product after its last reference
        and before its own `artifact` record (the write is the tool's side
        effect, the record follows it): see `polyloop._run.artifacts.judge`.
        """
        if self.finished is not None or self.completed_steps >= len(self.steps):
            return []
        st = self.steps[self.completed_steps]
        return [
            x for x in st.actions
            if x.result is None and x.returned is None and x.verdict is None
            and not (x.precondition is not None and not x.precondition.passed)
        ]
