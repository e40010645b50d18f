"""Run ids, pre-allocated result ids and idempotency keys."""

from __future__ import annotations

import hashlib
import os
import re
import time

import orjson

from .errors import InvalidInputError, InvalidRunIdError

_SAFE_RUN_ID = re.compile(r"[A-Za-z0-9._-]+")
MAX_RUN_ID_LENGTH = 200


def check_run_id(run_id: object) -> str:
    """Return `run_id` if it is a safe file name, else raise `InvalidRunIdError`.

    Safe means `[A-Za-z0-9._-]+`, ASCII only, not starting with a dot (a
    hidden file) or a dash (every command printed for it would read as an
    option) and at most 200 characters. Unsafe ids are rejected, never escaped or hashed.
    """
    if (
        not isinstance(run_id, str)
        or not run_id
        or len(run_id) > MAX_RUN_ID_LENGTH
        or run_id.startswith((".", "-"))
        or not _SAFE_RUN_ID.fullmatch(run_id)
    ):
        raise InvalidRunIdError(run_id)
    return run_id


def check_artifact_name(name: object) -> str:
    """Return `name` if it is a safe product name, else raise `InvalidInputError`.

    The rules of `check_run_id`: `[A-Za-z0-9._-]+`, not starting with a dot
    or a dash, at most 200 characters. A product name is one file name in
    its run's product folder: no `/`, no `..`, no way out of it.
    """
    try:
        return check_run_id(name)
    except InvalidRunIdError:
        raise InvalidInputError(
            f"invalid product name {name!r}: use letters, digits, '.', '_' and '-' only, "
            f"not starting with '.' or '-', at most {MAX_RUN_ID_LENGTH} characters"
        ) from None


def new_run_id() -> str:
    """A fresh run id that sorts by creation time: `run-20261130T104259Z-3f9a1c`."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return f"run-{stamp}-{os.urandom(3).hex()}"


def result_id(kind: str, step: int, attempt: int, call: int | None = None) -> str:
    """The result id of an execution: `s3-m1` (model call), `s3-a2` (action) or `s3-r1` (rollback).

    In a step whose model output carries several tool calls (log format
    1.2), an action or rollback also names its call: `s3-c2-a1` is the first
    attempt of the step's second call. Deterministic, so a resumed run and an
    uninterrupted one write the same log; unique within a run because
    (step, kind, call, attempt) is.
    """
    letter = _LETTERS[kind]
    if call is None:
        return f"s{step}-{letter}{attempt}"
    return f"s{step}-c{call}-{letter}{attempt}"


_LETTERS = {"model_call": "m", "action": "a", "rollback": "r"}


def call_id(model_result_id: str, call: int, calls: int) -> str:
    """The id a tool call carries in the model's history: its model call's result id when it
    is the only call of the step (`s3-m1`), else that id and its number (`s3-m1-c2`)."""
    return model_result_id if calls == 1 else f"{model_result_id}-c{call}"


def rollback_key(action_key: str) -> str:
    """The idempotency key of an action's rollback: derived from, and distinct from, the action's."""
    return f"{action_key}-rollback"


def idempotency_key(run_id: str, step: int, tool: str, args: dict, call: int | None = None) -> str:
    """A key stable across every replay of the same logical action of a run.

    `call` numbers the tool call within a step of several (so two identical
    calls of one step get two keys); a step's only call has none.
    """
    memo = (run_id, step, tool, id(args), call)
    kept = _derived.pop(memo, None)
    if kept is not None and kept[0] is args:
        return kept[1]
    what: list[object] = [run_id, step, tool, args] if call is None else [run_id, step, tool, args, call]
    digest = hashlib.sha256(orjson.dumps(what, option=orjson.OPT_SORT_KEYS)).hexdigest()
    key = f"pl-{digest[:32]}"
    if len(_derived) >= _DERIVED_KEPT:
        _derived.clear()
    _derived[memo] = (args, key)
    return key


# The run loop derives an action's key for its intent, and the walker it feeds derives it
# again to check that intent: the same pure function of the same values (a sorted JSON
# encoding and a SHA-256, ~9% of an in-memory step under cProfile). A key is kept until it is
# asked for once more, by the identity of its arguments' dict, which is held so that identity
# cannot pass to another dict; the library never changes a model's arguments in place.
_DERIVED_KEPT = 1024
_derived: dict[tuple[str, int, str, int, int | None], tuple[dict, str]] = {}

