"""How an execution is named to a person, in every message that names one (inspect, stops, batch)."""

from __future__ import annotations

from typing import Any


def execution_name(e: Any) -> str:
    """How an action or a rollback is named to a person: `transfer (s1-a1, step 1)`, and a rollback as the
    rollback it is, `the rollback that compensates transfer s1-a1 (s1-r1, step 1)`.

    `e` is an execution of the verdict (`tool`, `result_id`, `step`, `kind`, `guards`, `rolls_back`).
    """
    if e.kind != "rollback":
        return f"{e.tool} ({e.result_id}, step {e.step})"
    how = {"undo": "undoes", "compensate": "compensates"}.get((e.guards or {}).get("rollback"), "rolls back")
    of = f" {e.rolls_back}" if e.rolls_back else ""
    return f"the rollback that {how} {e.tool}{of} ({e.result_id}, step {e.step})"
