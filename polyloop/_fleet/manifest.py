"""A batch's manifest: what it first planned, so a changed, moved or removed goals line is reported.

The manifest `DIR/.batch-NAME.json` records the target the batch first ran
and, per run id, the line and hashes of what that line asked (goal and
inputs together, and apart) the first time the batch saw it; it is only ever
added to (the one exception is in `polyloop/_fleet/plan.py`'s docstring).
`reconcile` compares a planned goals file against it; `batch_lock` holds the
batch while it runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson

from .._files import read_regular
from .plan import BatchError, BatchLine, fresh_run_advice, goal_digest, inputs_digest

MANIFEST_VERSION = 1


@dataclass(frozen=True, slots=True)
class Manifest:
    """What a batch recorded: the target it first ran (None before its first run) and its runs.

    `runs` maps a run id to `{"line", "digest", "goal_digest", "inputs_digest"}`
    as first planned (entries of older manifests have only the first two).
    """

    target: str | None = None
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)



def manifest_path(directory: Path, name: str) -> Path:
    return directory / f".batch-{name}.json"


def load_manifest(path: Path) -> Manifest:
    """The manifest at `path`; an empty one when there is none yet."""
    try:
        doc = orjson.loads(read_regular(path))
    except FileNotFoundError:
        return Manifest()
    except (OSError, orjson.JSONDecodeError) as exc:
        raise BatchError(
            f"the batch manifest {path} cannot be read ({exc}); it is written atomically, so "
            "something else changed it: restore it, or give the batch a new --name"
        ) from exc
    runs = doc.get("runs") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or doc.get("version") != MANIFEST_VERSION or not isinstance(runs, dict):
        raise BatchError(
            f"the batch manifest {path} is not a version {MANIFEST_VERSION} manifest; "
            "restore it, or give the batch a new --name"
        )
    target = doc.get("target")
    return Manifest(target if isinstance(target, str) else None, runs)


def reconcile(
    lines: list[BatchLine], manifest: Manifest, *, target: str
) -> tuple[list[BatchLine], list[BatchLine], dict[str, dict[str, Any]]]:
    """Compare the lines, and the target they are to run with, with the manifest.

    A batch recorded with another target starts nothing: every line that
    could run is reported `changed`, naming both targets.

    A recorded run is intact when a line still names its run id with its
    digest; any other recorded run was displaced (its line changed, turned
    bad or is gone). A line with a new run id that asks what a displaced run
    asked has moved: it is reported `changed`, naming that run, and never
    started again. While any recorded run is displaced, no line with a new
    run id starts (the file is not what the batch first ran); new lines of an
    otherwise unchanged file do.

    Returns:
        The lines (a line that changed, moved or must wait gets an error),
        the recorded runs no line names any more (as error lines), and the
        manifest to write: the recorded runs plus the new ones that start,
        never a recorded entry rewritten.
    """
    recorded = manifest.runs
    if manifest.target is not None and manifest.target != target:
        def error(own_id: bool) -> str:
            return (
                f"the batch first ran with the agent target {manifest.target}, not {target}; nothing "
                f"starts with another agent: run the batch with that target, or "
                f"{fresh_run_advice(own_id, recorded=True)}"
            )

        named = {x.run_id for x in lines}
        others = [
            BatchLine(_line_of(entry), run_id, changed=True, error=error(False))
            for run_id, entry in recorded.items() if run_id not in named
        ]
        out = [x if x.error is not None else replace(x, changed=True, error=error(x.own_id)) for x in lines]
        return out, others, dict(recorded)
    intact = {
        x.run_id for x in lines
        if x.error is None and x.run_id in recorded and recorded[x.run_id].get("digest") == x.digest
    }
    displaced = {run_id: entry for run_id, entry in recorded.items() if run_id not in intact}
    moved = _moves(lines, displaced, intact)
    named = {x.run_id for x in lines if x.run_id is not None}
    gone = [run_id for run_id in displaced if run_id not in named]
    why = _what_differs(lines, displaced, gone)
    updated = dict(recorded)
    out = []
    for line in lines:
        if line.error is None and line.run_id not in intact:
            error = _changed(line, recorded, moved.get(line.line), why)
            if error is None:
                updated[line.run_id] = _entry(line)  # type: ignore[index]
            else:
                line = replace(line, changed=True, error=error)
        out.append(line)
    went = {run_id: number for number, (run_id, _) in moved.items()}
    removed = [_gone(run_id, recorded[run_id], went.get(run_id)) for run_id in gone]
    return out, removed, updated


def _moves(
    lines: list[BatchLine], displaced: dict[str, dict[str, Any]], intact: set[str | None]
) -> dict[int, tuple[str, dict[str, Any]]]:
    """Line number -> the displaced run whose goal and inputs that line now carries (each run claimed once)."""
    by_digest: dict[Any, list[str]] = {}
    for run_id, entry in sorted(displaced.items(), key=lambda kv: _line_of(kv[1])):
        by_digest.setdefault(entry.get("digest"), []).append(run_id)
    out = {}
    for line in lines:
        if line.error is not None or line.run_id in intact:
            continue
        candidates = [r for r in by_digest.get(line.digest, ()) if r != line.run_id]
        if candidates:
            by_digest[line.digest].remove(candidates[0])
            out[line.line] = (candidates[0], displaced[candidates[0]])
    return out


def _changed(
    line: BatchLine, recorded: dict[str, dict[str, Any]], moved: tuple[str, dict[str, Any]] | None, why: str | None
) -> str | None:
    """Why a line that is not intact does not run now (None: it is new and starts)."""
    entry = recorded.get(line.run_id)  # type: ignore[arg-type]
    if moved is not None:
        other, was = moved
        where = f"run {other} (then on line {was.get('line')})"
        if entry is None:
            return (
                f"the goals file changed: this line asks what {where} asked, so it moved; it is not "
                "started again as a new run: restore the goals file, or give the batch a new --name"
            )
        now = f"; this line now asks what {where} asked"
    else:
        now = ""
    if entry is not None:
        return (
            f"the goals file changed: run {line.run_id} was planned {_what_changed(entry, line)}"
            f"{now}; restore the goals file, or {fresh_run_advice(line.own_id, recorded=True)}"
        )
    if why is not None:
        return (
            f"not started: the goals file changed since the batch first ran ({why}); restore it, "
            "or give the batch a new --name"
        )
    return None


def _entry(line: BatchLine) -> dict[str, Any]:
    # `goal_digest` and `inputs_digest` say which part of a changed line changed (older entries lack them).
    return {
        "line": line.line,
        "digest": line.digest,
        "goal_digest": goal_digest(line.goal or "", None),
        "inputs_digest": inputs_digest(line.inputs),
    }


def _what_changed(entry: dict[str, Any], line: BatchLine) -> str:
    then = f"(then on line {entry.get('line')})"
    if "goal_digest" not in entry:  # written before the parts were recorded
        return f"for another goal or other inputs {then}"
    goal = entry["goal_digest"] != goal_digest(line.goal or "", None)
    inputs = entry.get("inputs_digest") != inputs_digest(line.inputs)
    if goal and inputs:
        return f"for another goal with other inputs {then}"
    if goal:
        return f"for another goal {then}"
    return f"with other inputs {then[:-1]}; the goal is the same)"


def _what_differs(lines: list[BatchLine], displaced: dict[str, dict[str, Any]], gone: list[str]) -> str | None:
    if not displaced:
        return None
    changed = sorted({x.line for x in lines if x.run_id in displaced})
    parts = []
    if changed:
        parts.append(f"{_numbers(changed)} changed")
    if gone:
        parts.append(f"{_numbers(sorted({_line_of(displaced[r]) for r in gone}))} gone")
    return " and ".join(parts)


def _numbers(numbers: list[int], most: int = 5) -> str:
    word = "line" if len(numbers) == 1 else "lines"
    if len(numbers) > most:
        return f"{word} {', '.join(map(str, numbers[:most]))} and {len(numbers) - most} more"
    if len(numbers) == 1:
        return f"{word} {numbers[0]}"
    return f"{word} {', '.join(map(str, numbers[:-1]))} and {numbers[-1]}"


def _line_of(entry: dict[str, Any]) -> int:
    line = entry.get("line")
    return line if isinstance(line, int) else 0


def _gone(run_id: str, entry: dict[str, Any], now_on: int | None) -> BatchLine:
    moved = f" (what it asked is now on line {now_on})" if now_on is not None else ""
    return BatchLine(
        _line_of(entry),
        run_id,
        changed=True,
        error=f"the goals file changed: line {entry.get('line')} (run {run_id}) is gone{moved}; "
        "restore it, or give the batch a new --name",
    )


def save_manifest(path: Path, *, name: str, target: str, runs: dict[str, dict[str, Any]]) -> None:
    """Write the manifest atomically: a temp file, fsync, rename, fsync of the directory."""
    doc = {"version": MANIFEST_VERSION, "name": name, "target": target, "runs": runs}
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise BatchError(f"cannot write the batch manifest {path}: {exc.strerror or exc}") from exc


@contextlib.contextmanager
def batch_lock(directory: Path, name: str) -> Iterator[None]:
    """Keep a batch to one live invocation (an flock the OS releases if the holder dies).

    The file is `.batch-NAME.held`, never `*.lock`, so it cannot be the lock of a run id.
    """
    path = directory / f".batch-{name}.held"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise BatchError(f"cannot create {path}: {exc.strerror}") from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 100, 0).decode("utf-8", "replace").strip() or "another process"
            raise BatchError(
                f"batch {name} is already running in {directory} ({holder}); wait for it to end"
            ) from None
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()}".encode(), 0)
        yield
    finally:
        os.close(fd)
