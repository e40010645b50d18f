"""Checkpoint validity (log format 1.2): what a run depends on, recorded at its start, compared on resume.

`run_started.config` records three things a run's products depend on:

* `logic_version`: the agent's declared version, or for `"auto"` a SHA-256
  over the agent's source files (`auto:<hex>`);
* `inputs`: per named input `{"kind", "path", "sha256"}` (a file, a
  directory hashed over its relative paths and contents, or bytes);
* `config_hashes`: a SHA-256 per part of the agent's configuration
  (`system`, `model`, `tool NAME`).

`differences` recomputes them and lists every change against what the log
says now (the start, updated by each accepted `checkpoint_accepted`). It is
the one place that decides a checkpoint is stale; a field absent at the
start (a log older than 1.2) is never compared. See
docs/how-to/change-an-agent-safely.md.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from .._log import commands
from .._log.errors import CheckpointError, InvalidInputError
from .._files import NotRegularFileError, open_regular

if TYPE_CHECKING:
    from .run_port import AgentPort
    from .tools import Tool
    from .._log.records import CheckpointAccepted, RunStarted

_CHUNK = 1 << 20
_LIBRARY = str(Path(__file__).resolve().parent) + os.sep


# -- fingerprints -----------------------------------------------------------------------


def fingerprint_input(name: str, value: Any) -> dict[str, Any]:
    """`{"kind", "path", "sha256"}` of one input: bytes, a file, or a directory.

    A directory's hash covers every regular file below it: its path relative
    to the directory (with `/`) and its contents, in sorted order, so it does
    not depend on where the directory lives or on listing order. Symbolic
    links are followed for files and not descended into for directories.

    A path that is neither a regular file nor a directory (a FIFO, a
    device, a socket) is refused, never opened in a way that could wait.

    Raises:
        InvalidInputError: the path does not exist, cannot be read, or is
            not a regular file or a directory.
    """
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"kind": "bytes", "path": None, "sha256": hashlib.sha256(bytes(value)).hexdigest()}
    if not isinstance(value, (str, os.PathLike)):
        raise InvalidInputError(f"input {name!r} must be a path or bytes, not {type(value).__name__}")
    path = Path(value).resolve()
    try:
        if path.is_dir():
            return {"kind": "directory", "path": str(path), "sha256": _hash_directory(path)}
        return {"kind": "file", "path": str(path), "sha256": _hash_file(path)}
    except NotRegularFileError as exc:
        raise InvalidInputError(f"input {name!r}: {exc.filename} is {exc.kind}, not a regular file or a directory") from None
    except OSError as exc:
        raise InvalidInputError(f"input {name!r} cannot be read: {exc.strerror or exc} ({path})") from None


def _hash_file(path: Path, into: Any = None) -> str:
    h = into if into is not None else hashlib.sha256()
    with open(open_regular(path), "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _hash_directory(root: Path) -> str:
    files: list[tuple[str, Path]] = []
    for here, dirs, names in os.walk(root, onerror=_raise):
        dirs.sort()
        for n in names:
            p = Path(here) / n
            if p.is_file():
                files.append((p.relative_to(root).as_posix(), p))
    h = hashlib.sha256()
    for rel, p in sorted(files):
        sub = hashlib.sha256()
        _hash_file(p, sub)
        h.update(orjson.dumps([rel, sub.hexdigest()]) + b"\n")
    return h.hexdigest()


def _raise(exc: OSError) -> None:
    raise exc


def fingerprint_inputs(inputs: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """`fingerprint_input` of every named input (names must be non-empty strings)."""
    if not isinstance(inputs, Mapping):
        raise InvalidInputError(f"inputs must be a mapping of name to path or bytes, not {type(inputs).__name__}")
    out = {}
    for name, value in inputs.items():
        if not isinstance(name, str) or not name:
            raise InvalidInputError(f"an input name must be a non-empty string, not {name!r}")
        out[name] = fingerprint_input(name, value)
    return out


def _digest(value: Any) -> str:
    data = orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS, default=repr)
    return hashlib.sha256(data).hexdigest()


def config_hashes(agent: AgentPort) -> dict[str, str]:
    """A SHA-256 per part of the agent's configuration: `system`, `model`, `tool NAME`.

    A tool's part covers its name, description, argument schema, replay
    policy, guards and failure budget, so a changed policy or signature is
    named as that tool's change; for a tool from an MCP server also its
    origin (server, trust, annotations, where its policy came from), so a
    server cannot change what a tool claims between a crash and its replay.
    """
    describe = getattr(agent.model, "describe", None)
    model = describe() if callable(describe) else {"type": type(agent.model).__name__}
    parts = {"system": _digest(agent.system), "model": _digest(model)}
    for t in agent.tools:
        parts[f"tool {t.name}"] = tool_hash(t)
    return parts


def tool_hash(t: Tool) -> str:
    """One tool's part of `config_hashes`."""
    part: dict[str, Any] = {
        "spec": t.spec(), "replay": t.replay, "guards": t.guard_config(), "max_failures": t.max_failures,
    }
    if t.origin is not None:  # an MCP tool: its server, annotations and policy's source (1.4)
        part["origin"] = t.origin
    return _digest(part)


def source_files(agent: AgentPort) -> list[str]:
    """The files `logic_version="auto"` hashes: where the agent was built, and its tools' modules.

    PolyLoop's own files are left out (upgrading the library is not a change
    of the agent's logic).
    """
    files = {agent._origin} if agent._origin else set()
    for t in agent.tools:
        code = getattr(t.fn, "__code__", None)
        if code is not None:
            files.add(code.co_filename)
    model_module = sys.modules.get(type(agent.model).__module__)
    if model_module is not None and getattr(model_module, "__file__", None):
        files.add(model_module.__file__)
    found = (str(Path(f).resolve()) for f in files if f and not f.startswith("<"))
    return sorted(f for f in found if not f.startswith(_LIBRARY) and os.path.isfile(f))


def resolved_logic_version(agent: AgentPort) -> str | None:
    """The logic version to record: the declared string, `auto:<sha256>` for `"auto"`, or None."""
    declared = agent.logic_version
    if declared != "auto":
        return declared
    h = hashlib.sha256()
    for f in source_files(agent):
        h.update(orjson.dumps(Path(f).name) + b"\n")
        _hash_file(Path(f), h)
    return "auto:" + h.hexdigest()


def checkpoint_config(agent: AgentPort, inputs: Mapping[str, Any] | None) -> dict[str, Any]:
    """The 1.2 fields of `run_started.config` that `differences` compares later."""
    return {
        "logic_version": resolved_logic_version(agent),
        "inputs": fingerprint_inputs(inputs or {}),
        "config_hashes": config_hashes(agent),
    }


# -- comparing ------------------------------------------------------------------------------


def reference(started: RunStarted, accepted: list[CheckpointAccepted]) -> dict[tuple[str, str], Any]:
    """What the log says the run depends on: {(what, name): value}, after every accepted change.

    Values are hashes (or the version string); for inputs, the whole
    fingerprint (its `path` is where a resume re-reads it).
    """
    config = started.config
    ref: dict[tuple[str, str], Any] = {}
    if "logic_version" in config:
        ref[("logic_version", "")] = config["logic_version"]
    for name, h in (config.get("config_hashes") or {}).items():
        ref[("config", name)] = h
    for name, fp in (config.get("inputs") or {}).items():
        ref[("input", name)] = fp
    for acc in accepted:
        for d in acc.differences:
            key = (d["what"], d["name"])
            if d["what"] == "input":
                now = d.get("now")
                ref[key] = None if now is None else {"sha256": now, "path": d.get("path"), "kind": d.get("kind")}
            elif d["what"] in ("logic_version", "config"):
                ref[key] = d.get("now")
    return ref


def differences(
    started: RunStarted,
    accepted: list[CheckpointAccepted],
    agent: AgentPort,
    *,
    inputs: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Every way the run's checkpoint no longer matches: `[{"what", "name", "recorded", "now"}]`.

    `what` is `logic_version`, `config` (name: `system`, `model` or `tool
    NAME`) or `input` (name: the input's; entries also carry `path` and
    `kind` of what was read now). Nothing the start did not record is
    compared. Inputs are re-read from the paths recorded for them, unless
    `inputs` is given: then those are the run's inputs now (a recorded name
    missing from them is a difference). A bytes input is compared only when
    `inputs` names it again.
    """
    ref = reference(started, accepted)
    out: list[dict[str, Any]] = []
    if ("logic_version", "") in ref:
        now = resolved_logic_version(agent)
        if now != ref[("logic_version", "")]:
            out.append({"what": "logic_version", "name": "", "recorded": ref[("logic_version", "")], "now": now})
    recorded_parts = {name for (what, name) in ref if what == "config"}
    if recorded_parts:
        hashes = config_hashes(agent)
        for name in sorted(recorded_parts | set(hashes)):
            was, now = ref.get(("config", name)), hashes.get(name)
            if was != now:
                out.append({"what": "config", "name": name, "recorded": was, "now": now})
    if "inputs" in started.config:
        out.extend(_input_differences(ref, inputs))
    return out


def _input_differences(ref: dict[tuple[str, str], Any], given: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    recorded = {name: fp for (what, name), fp in ref.items() if what == "input"}
    if not recorded and not given:
        return []
    now: dict[str, dict[str, Any] | None] = {}
    if given is not None:
        for name in given:
            now[name] = fingerprint_inputs({name: given[name]})[name]
        for name in recorded:
            now.setdefault(name, None)
    else:
        for name, fp in recorded.items():
            if fp is None or fp.get("path") is None:
                continue  # bytes (or an input accepted as gone): nothing to re-read
            try:
                now[name] = fingerprint_input(name, fp["path"])
            except InvalidInputError:
                now[name] = None  # gone or unreadable: a difference, named as such
    out = []
    for name in sorted(now):
        was, fp = recorded.get(name), now[name]
        was_hash = was["sha256"] if was else None
        now_hash = fp["sha256"] if fp else None
        if was_hash != now_hash:
            d: dict[str, Any] = {"what": "input", "name": name, "recorded": was_hash, "now": now_hash}
            d["path"] = fp["path"] if fp else (was or {}).get("path")
            d["kind"] = fp["kind"] if fp else (was or {}).get("kind")
            out.append(d)
    return out


# -- saying it ------------------------------------------------------------------------------


def _short(value: Any) -> str:
    if value is None:
        return "none"
    text = str(value)
    return text[:12] + "…" if len(text) > 40 else text


def explain(d: dict[str, Any]) -> str:
    """One difference in words: what changed, old and new."""
    what, name = d["what"], d["name"]
    was, now = d.get("recorded"), d.get("now")
    if what == "logic_version":
        return f"the logic version changed from {was!r} to {now!r}"
    if what == "input":
        where = f" ({d['path']})" if d.get("path") else ""
        if was is None:
            return f"input {name!r}{where} is new (sha256 {_short(now)})"
        if now is None:
            return f"input {name!r}{where} is missing or unreadable (recorded sha256 {_short(was)})"
        return f"input {name!r}{where} changed: sha256 {_short(was)} recorded, {_short(now)} now"
    if what == "config":
        part = {"system": "the system prompt", "model": "the model description"}.get(name, name)
        if was is None:
            return f"the agent's configuration gained {part}"
        if now is None:
            return f"the agent's configuration lost {part}"
        return f"{part} changed (config sha256 {_short(was)} recorded, {_short(now)} now)"
    if what == "product":
        where = f" ({was['path']})" if isinstance(was, dict) and was.get("path") else ""
        if now is None:
            return f"product {name!r}{where} is missing"
        before = was.get("sha256") if isinstance(was, dict) else None
        return (f"product {name!r}{where} was altered: sha256 {_short(before)} recorded, "
                f"{_short(now.get('sha256') if isinstance(now, dict) else now)} now")
    return f"{what} {name!r} changed: {_short(was)} recorded, {_short(now)} now"


def refusal(run_id: str, diffs: list[dict[str, Any]]) -> CheckpointError:
    """The `CheckpointError` that refuses a resume, naming every difference and the two ways forward."""
    message = (
        f"run {run_id!r} cannot resume: its checkpoint is no longer valid: "
        + "; ".join(explain(d) for d in diffs)
        + ". Either start over under a new run id, or accept the changes on the record with "
        f"`{commands.accept_changes(run_id)}` "
        "(Python: accept_changes=True, reason=...)"
    )
    return CheckpointError(run_id, message, diffs)
