"""Run ids, pre-allocated result ids and idempotency keys."""

from __future__ import annotations

import hashlib
import os
import re
import time

import orjson

from ._errors import InvalidInputError, InvalidRunIdError

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


def check_product_name(name: object) -> str:
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


def result_id(kind: str, step: int, attempt: int) -> str:
    """The result id of an execution: `s3-m1` (model call), `s3-a2` (action) or `s3-r1` (rollback).

    Deterministic, so a resumed run and an uninterrupted one write the same
    log; unique within a run because (step, kind, attempt) is.
    """
    letter = {"model_call": "m", "action": "a", "rollback": "r"}[kind]
    return f"s{step}-{letter}{attempt}"


def rollback_key(action_key: str) -> str:
    """The idempotency key of an action's rollback: derived from, and distinct from, the action's."""
    return f"{action_key}-rollback"


def idempotency_key(run_id: str, step: int, tool: str, args: dict) -> str:
    """A key stable across every replay of the same logical action of a run."""
    digest = hashlib.sha256(
        orjson.dumps([run_id, step, tool, args], option=orjson.OPT_SORT_KEYS)
    ).hexdigest()
    return f"pl-{digest[:32]}"
