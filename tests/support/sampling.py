"""Which kill points a test run covers: a sample by default, the rest marked `slow` (run by CI's `pytest -m slow`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import pytest
from _pytest.mark.structures import ParameterSet


def sampled(points: Sequence[Any], keep: int, *, ids: Any = None) -> list[Any]:
    """Every kill point as a test parameter: `keep` of them spread evenly (the first and the last
    always among them) run by default; the others are marked `slow`, deselected by default and run
    by CI's second command (`pytest -m slow`), so the default suite stays within its time budget and
    CI still kills at every point. `POLYLOOP_ALL_KILL_POINTS=1` runs them all by default.

    A point is a value, or a `pytest.param` (kept with its id and marks); `ids(point)` names a value.
    """
    if os.environ.get("POLYLOOP_ALL_KILL_POINTS") == "1" or len(points) <= keep:
        chosen = set(range(len(points)))
    else:
        step = (len(points) - 1) / (keep - 1)
        chosen = {round(i * step) for i in range(keep)}
    out = []
    for i, p in enumerate(points):
        param = p if isinstance(p, ParameterSet) else pytest.param(p, id=ids(p) if ids else None)
        if i not in chosen:
            param = pytest.param(*param.values, marks=[*param.marks, pytest.mark.slow], id=param.id)
        out.append(param)
    return out


def selected(request: pytest.FixtureRequest, name: str) -> list[Any]:
    """The values of parameter `name` of the tests of this module that this session runs
    (a module-scoped matrix builds the scenarios of its selected points only)."""
    values = []
    for item in request.session.items:
        params = getattr(item, "callspec", None)
        if item.module is request.module and params is not None and name in params.params:
            if params.params[name] not in values:
                values.append(params.params[name])
    return values
