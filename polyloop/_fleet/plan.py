"""Planning a batch: reading its goals, naming its runs, and the manifest that spots a changed file.

The rules a reader of docs/how-to/run-a-thousand-rollouts.md relies on:

* A goals file is JSONL when its first non-blank line starts with `{`; otherwise
  every non-blank line is one goal (surrounding whitespace stripped). Lines
  given as Python items are goals (a string) or line objects (a mapping).
* A JSONL line is an object with a string `goal`, an optional `run_id` and an
  optional `inputs`; other keys are ignored. Blank lines are skipped in both forms,
  and line numbers are the file's own (1-based, blank lines counted).
* A line without a `run_id` runs as `NAME-LLLLL`: the batch name and the line
  number, zero-padded to five digits. A new `--name` renames these, never a
  line's own `run_id` (so advice to get a line a new run says which to change:
  `fresh_run_advice`).
* The manifest `DIR/.batch-NAME.json` records the target the batch first ran
  and, per run id, the line and hashes of what that line asked (goal and
  inputs together, and apart) the first time the batch saw it; it is only
  ever added to, so a changed or removed line (or another target) is
  reported on every later invocation. The one exception: a run id found to
  name another's run (a log with another goal or target) is withdrawn, as the
  batch never ran it, so the line can take another run id.
"""

from __future__ import annotations

import hashlib
import inspect
import io
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson

from .._run.agent import Agent
from .._log.errors import InvalidRunIdError, PolyLoopError
from .._files import NotRegularFileError, read_regular
from .._log.ids import check_run_id

MAX_NAME_LENGTH = 150  # leaves room for `-LLLLL` within the 200 characters of a run id
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class BatchError(PolyLoopError, ValueError):
    """A batch cannot start: its goals cannot be read, its name is unsafe, or it is already running.

    Differs from a bad line (reported per line while the rest of the batch
    runs): nothing has run when this is raised.
    """


@dataclass(frozen=True, slots=True)
class BatchLine:
    """One line of a goals file, as planned.

    `run_id` is None only when the line names an unsafe run id; `error` says
    why the line will not run (a bad line, or one that changed since the
    batch first saw it). `own_id` says the run id is the line's own
    `"run_id"`, not `NAME-LLLLL`, so a new batch name leaves it unchanged.
    """

    line: int
    run_id: str | None
    goal: str | None = None
    inputs: Any = None
    digest: str | None = None
    error: str | None = None
    changed: bool = False
    own_id: bool = False


def default_name(goals: str | os.PathLike[str]) -> str:
    """The batch name a goals file gets by default: its stem, made a safe run id prefix."""
    stem = _UNSAFE.sub("-", Path(goals).stem).lstrip(".-")[:MAX_NAME_LENGTH].rstrip(".-")
    return stem or "batch"


def check_name(name: str) -> str:
    """`name` if it can prefix run ids and name the manifest, else `BatchError`."""
    try:
        check_run_id(name)
    except InvalidRunIdError:
        raise BatchError(
            f"invalid batch name {name!r}: use letters, digits, '.', '_' and '-' only, "
            "not starting with '.'"
        ) from None
    if len(name) > MAX_NAME_LENGTH:
        raise BatchError(
            f"the batch name is {len(name)} characters long; the limit is {MAX_NAME_LENGTH}: give a shorter --name"
        )
    return name


def fresh_run_advice(own_id: bool, *, recorded: bool) -> str:
    """How a line gets a run id no run has yet: the end of a refusal's advice.

    A new `--name` renames the generated ids (`NAME-LLLLL`) only; a line's own
    `"run_id"` has to change itself. While this batch's manifest records the
    line's run (`recorded`), a new id alone would make the line a moved one,
    so that takes a new `--name` too.
    """
    if not own_id:
        return "give the batch a new --name"
    if recorded:
        return 'give the batch a new --name and this line a new "run_id" (--name leaves a line\'s own run id as it is)'
    return 'give this line another "run_id" (or remove it)'


def accepts_inputs() -> bool:
    """Whether this version's `Agent.run` takes `inputs=` (checked when a batch plans)."""
    return "inputs" in inspect.signature(Agent.run).parameters


def read_goals(source: Any, *, name: str) -> list[BatchLine]:
    """Plan every line of `source`: a goals file (a path, or the file opened), or lines given as Python items.

    A goals file's lines are JSONL or plain text, decided by its first
    non-blank line. Given as Python items, a string is always one goal (even
    one that looks like JSON) and a mapping is a line's object; any other
    item is a bad line.

    Raises:
        BatchError: the file cannot be read (missing, unreadable, or not a
            regular file: a directory, a FIFO, a device).
    """
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        try:
            data = read_regular(path)
        except FileNotFoundError:
            raise BatchError(f"no goals file {path}") from None
        except NotRegularFileError as exc:  # a FIFO is refused, never waited on
            raise BatchError(f"the goals file {path} is {exc.kind}, not a regular file") from None
        except OSError as exc:
            raise BatchError(f"cannot read the goals file {path}: {exc.strerror}") from exc
        raw: list[Any] = data.split(b"\n")
        if raw and raw[-1] == b"":
            raw.pop()
    elif isinstance(source, Iterable):
        raw = list(source)
    else:
        raise TypeError(f"goals must be a path or an iterable of lines, not {type(source).__name__}")
    from_file = isinstance(source, str | os.PathLike | io.IOBase)
    jsonl = from_file and _is_jsonl(raw)
    inputs_ok = accepts_inputs()
    lines: list[BatchLine] = []
    seen: dict[str, int] = {}
    for number, item in enumerate(raw, start=1):
        default_id = f"{name}-{number:05d}"
        if from_file:
            planned = _plan_line(number, item, default_id=default_id, jsonl=jsonl, inputs_ok=inputs_ok)
        else:
            planned = _plan_item(number, item, default_id=default_id, inputs_ok=inputs_ok)
        if planned is None:
            continue
        if planned.run_id is not None and planned.error is None:
            first = seen.setdefault(planned.run_id, number)
            if first != number:
                planned = replace(
                    planned,
                    error=f'run id {planned.run_id!r} is already used by line {first}: give this line another "run_id"',
                )
        lines.append(planned)
    return lines


def _text(item: Any) -> str | None:
    if isinstance(item, bytes):
        try:
            return item.decode("utf-8")
        except UnicodeDecodeError:
            return None
    return item if isinstance(item, str) else None


def _is_jsonl(raw: list[Any]) -> bool:
    for item in raw:
        text = _text(item)
        if text is None:
            continue
        text = text.strip().lstrip("\ufeff")
        if text:
            return text.startswith("{")
    return False


def _plan_item(number: int, item: Any, *, default_id: str, inputs_ok: bool) -> BatchLine | None:
    """A line given as a Python item: a string is a goal, a mapping a line's object."""
    if isinstance(item, Mapping):
        return _plan_object(number, item, default_id=default_id, inputs_ok=inputs_ok)
    if not isinstance(item, str):
        return BatchLine(number, default_id, error=f"the line is {_python_kind(item)}: give a goal string or a mapping")
    goal = item.strip()
    return BatchLine(number, default_id, goal=goal, digest=goal_digest(goal, None)) if goal else None


def _plan_line(number: int, item: Any, *, default_id: str, jsonl: bool, inputs_ok: bool) -> BatchLine | None:
    """A line of a goals file (bytes, or str from a file opened as text)."""
    text = _text(item)
    if text is None:
        return BatchLine(number, default_id, error="the line is not UTF-8 text")
    stripped = text.lstrip("\ufeff")  # a BOM some editors write
    if not stripped.strip():
        return None  # blank lines are skipped, but keep their number
    if not jsonl:
        goal = stripped.strip()
        return BatchLine(number, default_id, goal=goal, digest=goal_digest(goal, None))
    try:
        obj = orjson.loads(stripped)
    except orjson.JSONDecodeError as exc:
        # orjson's "line 1 column N" counts within this one line: say it in the file's terms
        # (a BOM is not counted, as editors do not show it)
        where = f"column {exc.colno} of line {number}"
        return BatchLine(number, default_id, error=f"the line is not JSON ({exc.msg} at {where})")
    if not isinstance(obj, Mapping):
        return BatchLine(number, default_id, error=f"the line is {_json_kind(obj)}, not a JSON object")
    return _plan_object(number, obj, default_id=default_id, inputs_ok=inputs_ok)


def _plan_object(number: int, obj: Mapping[str, Any], *, default_id: str, inputs_ok: bool) -> BatchLine:
    if "run_id" in obj:
        try:
            return replace(_plan_goal(number, obj, check_run_id(obj["run_id"]), inputs_ok=inputs_ok), own_id=True)
        except InvalidRunIdError as exc:
            return BatchLine(number, None, error=str(exc), own_id=True)
    return _plan_goal(number, obj, default_id, inputs_ok=inputs_ok)


def _plan_goal(number: int, obj: Mapping[str, Any], run_id: str, *, inputs_ok: bool) -> BatchLine:
    goal = obj.get("goal")
    if not isinstance(goal, str):
        what = "has no" if goal is None else f"has {_json_kind(goal)} as its"
        return BatchLine(number, run_id, error=f'the line {what} "goal" (a string is required)')
    inputs = obj.get("inputs")
    if "inputs" in obj and not inputs_ok:
        return BatchLine(
            number,
            run_id,
            goal=goal,
            error='"inputs" is not supported yet by this version of polyloop '
            "(Agent.run takes no inputs); remove it from the line, or put what the run needs in its goal",
        )
    if inputs is not None and not (
        isinstance(inputs, dict) and all(isinstance(k, str) and k and isinstance(v, str) and v for k, v in inputs.items())
    ):
        return BatchLine(
            number, run_id, goal=goal,
            error='"inputs" must be an object of input names to file or directory paths ({"contract": "a.pdf"})',
        )
    return BatchLine(number, run_id, goal=goal, inputs=inputs, digest=goal_digest(goal, inputs))


def _python_kind(item: Any) -> str:
    if item is None:
        return "None"
    if isinstance(item, bytes | bytearray):
        return "bytes"
    kind = type(item).__name__
    return f"{'an' if kind[:1].lower() in 'aeiou' else 'a'} {kind}"


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, list):
        return "an array"
    return "a string" if isinstance(value, str) else "an object"


def goal_digest(goal: str, inputs: Any) -> str:
    """A stable hash of what a line asks for (its goal and inputs)."""
    return _sha256({"goal": goal} if inputs is None else {"goal": goal, "inputs": inputs})


def inputs_digest(inputs: Any) -> str | None:
    return None if inputs is None else _sha256(inputs)


def _sha256(doc: Any) -> str:
    try:
        data = orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        data = repr(doc).encode()
    return hashlib.sha256(data).hexdigest()
