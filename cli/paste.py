"""Commands an operator can paste: the one place each printed command is built.

Every message that tells a person what to run next (a settlement, a
decision, a resume, an inspect, a batch re-run) takes its text from here,
so the command a stop prints, the one `inspect` prints and the one a batch
summary prints are the same command.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from polyloop import default_directory
from polyloop.stores import redact_url, store_kind

from .terminal import clip, err, say


def dir_flag(directory: str | None) -> str:
    """` --dir DIR` (or ` --store URL`) when that is not where commands look by default."""
    if directory is None:
        return ""
    default = os.environ.get("POLYLOOP_STORE") or default_directory()
    if store_kind(directory) == "postgresql":
        if directory == default:
            return ""
        # Never a secret in a command to paste (a terminal, a CI log): the
        # reader supplies it the way libpq does (PGPASSWORD, ~/.pgpass); store_note says so.
        shown = place(directory)
        if shown != directory:
            _secrets_left_out.append(shown)
        return f" --store {shlex.quote(shown)}"
    if Path(directory) == Path(default):
        return ""
    return f" --dir {shlex.quote(directory)}"


def place(where: str) -> str:
    """Where runs live, for a message: a directory as given, a database URL without its secrets."""
    return redact_url(where)


_secrets_left_out: list[str] = []  # store URLs a command printed without their secrets


def store_note() -> None:
    """Once a command is done: if it printed a store URL without its secrets, say where they come from."""
    if _secrets_left_out:
        _secrets_left_out.clear()
        say(
            err(),
            ("polyloop: note: ", "dim"),
            "the commands printed leave the store URL's password out (it is never printed): give it "
            "with PGPASSWORD or ~/.pgpass, or put the URL in $POLYLOOP_STORE and leave --store out",
        )


def resume_command(run_id: str, directory: str | None) -> str:
    return f"polyloop resume {shlex.quote(run_id)}{dir_flag(directory)}"


def settle_commands(run_id: str, result_id: str, directory: str | None) -> tuple[str, str]:
    """The exact `mark-resolved` commands that settle an unknown execution: (executed, not executed)."""
    base = f"polyloop mark-resolved {shlex.quote(run_id)} {shlex.quote(result_id)}"
    where = dir_flag(directory)
    return f"{base} --executed{where}", f"{base} --not-executed{where}"


def accept_crash_loop_command(run_id: str, directory: str | None) -> str:
    """The resume that lifts a crash loop, on the record."""
    return f"polyloop resume {shlex.quote(run_id)} --accept-crash-loop --reason TEXT{dir_flag(directory)}"


def inspect_command(run_id: str, directory: str | None) -> str:
    return f"polyloop inspect {shlex.quote(run_id)}{dir_flag(directory)}"


def decide_commands(run_id: str, kind: str, request_id: str, directory: str | None) -> list[tuple[str, str]]:
    """The exact commands that decide a waiting request (`approval` or `answer`), each with what it means."""
    rid, where = f"{shlex.quote(run_id)} {shlex.quote(request_id)}", dir_flag(directory)
    if kind == "answer":
        return [(f"polyloop answer {rid} TEXT{where}", "the model reads TEXT as the answer")]
    return [
        (f"polyloop approve {rid} --reason TEXT{where}", "run it (add --args JSON to run edited arguments)"),
        (f"polyloop deny {rid} --reason TEXT{where}", "never run it: the model reads the denial"),
    ]


def waiting_commands(run_id: str, waiting: Sequence[Mapping[str, Any]], directory: str | None) -> list[tuple[str, str]]:
    """The commands that settle what a parked run waits for (`BatchRun.waiting`), each with what it means."""
    out: list[tuple[str, str]] = []
    for w in waiting:
        kind = w.get("kind", "unknown")
        if kind == "crash_loop":
            out.append((accept_crash_loop_command(run_id, directory), "resume it once more, on the record"))
        elif kind in ("approval", "answer"):
            out.extend(decide_commands(run_id, kind, str(w["id"]), directory))
        elif kind not in ("unknown", "alert"):
            # A kind of waiting this version does not know: inspect names its commands.
            out.append((inspect_command(run_id, directory), f"{kind}: inspect says how to settle it"))
        else:
            tool = clip(w.get("tool"), 60)
            executed, not_executed = settle_commands(run_id, str(w["id"]), directory)
            out += [(executed, f"{tool} happened"), (not_executed, f"{tool} did not happen")]
    return out


def batch_command(
    target: str, goals_file: str, name: str | None, directory: str | None, lease: float | None = None
) -> str:
    """The same `polyloop batch` again: how a batch resumes."""
    parts = ["polyloop", "batch", shlex.quote(target), shlex.quote(goals_file)]
    if name is not None:
        parts += ["--name", shlex.quote(name)]
    if lease is not None:
        parts += ["--lease", f"{lease:g}"]
    return " ".join(parts) + dir_flag(directory)
