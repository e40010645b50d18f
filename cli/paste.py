"""Commands an operator can paste, as the CLI prints them.

Each command's text is built in one place, the library's
`polyloop.for_cli.commands` (the library's own error messages and
inspect's `next` use it too); this module only turns a store spec into the
`Place` the commands name, and says once when a printed URL left its
password out.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from polyloop import PolyLoopError
from polyloop.for_cli import Place, canonical_target, commands, place_of
from polyloop.stores import redact_url

from .terminal import clip, err, say


def serve(directory: str) -> str:
    """Every command printed from now on (library messages too) names `directory` when not the default."""
    commands.serve(place_of(directory))
    return directory


def _place(directory: str | None) -> Place:
    return place_of(directory)


def dir_flag(directory: str | None) -> str:
    """` --dir DIR` (or ` --store URL`) when that is not where commands look by default."""
    return commands.where(_place(directory))


def place(where: str) -> str:
    """Where runs live, for a message: a directory as given, a database URL without its secrets."""
    return redact_url(where)


def store_note() -> None:
    """Once a command is done: if it printed a store URL without its secrets, say where they come from."""
    if commands.take_secret_note():
        say(
            err(),
            ("polyloop: note: ", "dim"),
            "the commands printed leave the store URL's password out (it is never printed): give it "
            "with PGPASSWORD or ~/.pgpass, or put the URL in $POLYLOOP_STORE and leave --store out",
        )


def resume_command(run_id: str, directory: str | None) -> str:
    return commands.resume(run_id, _place(directory))


def settle_commands(run_id: str, result_id: str, directory: str | None) -> tuple[str, str]:
    """The exact `mark-resolved` commands that settle an unknown execution: (executed, not executed)."""
    return commands.settle(run_id, result_id, _place(directory))


def inspect_command(run_id: str, directory: str | None) -> str:
    return commands.inspect(run_id, _place(directory))


def decide_commands(run_id: str, kind: str, request_id: str, directory: str | None) -> list[tuple[str, str]]:
    """The exact commands that decide a waiting request (`approval` or `answer`), each with what it means."""
    return commands.decide(run_id, kind, request_id, _place(directory))


def waiting_commands(run_id: str, waiting: Sequence[Mapping[str, Any]], directory: str | None) -> list[tuple[str, str]]:
    """The commands that settle what a parked run waits for (`BatchRun.waiting`), each with what it means."""
    shown = [{**w, "tool": clip(w.get("tool"), 60)} for w in waiting]
    return commands.waiting(run_id, shown, _place(directory))


def batch_command(
    target: str, goals_file: str, name: str | None, directory: str | None, lease: float | None = None
) -> str:
    """The same `polyloop batch` again: how a batch resumes (its paths absolute, to paste anywhere)."""
    try:
        target = canonical_target(target)
    except PolyLoopError:  # not a target at all: the batch refused it; say it as given
        pass
    return commands.batch(target, os.path.abspath(goals_file), name, _place(directory), lease)
