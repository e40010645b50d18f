"""The commands PolyLoop prints for a person to paste: the one place each is built.

Every message that says what to run next (a stop's settling commands, a
refusal's way forward, inspect's `next`, a batch summary, a worker's line)
takes its text from here, so they are the same command wherever they are
printed, quoted for a POSIX shell (`shlex.quote`).

A command names where the run lives (` --dir DIR` or ` --store URL`)
whenever that is not where a command with no flag would look
($POLYLOOP_STORE, else $POLYLOOP_DIR, else ./runs). That suffix is a
`Place`, made from a store spec by `polyloop.stores` (which knows how to
tell a directory from a URL and what of a URL is secret). A builder given
no place uses the place of the command being served (`serving`), which the
command line sets once it knows where runs live; a library caller that
sets none gets commands with no flag.
"""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Place:
    """Where a run lives, as a printed command names it.

    Attributes:
        flag: ` --dir DIR` or ` --store URL` (quoted, leading space), or ""
            for the default place.
        secret_left_out: the flag names a store URL whose password was left
            out (it is never printed); the reader supplies it as libpq does.
    """

    flag: str = ""
    secret_left_out: bool = False


DEFAULT = Place()
_serving: ContextVar[Place] = ContextVar("polyloop_place", default=DEFAULT)
_secrets_left_out: list[Place] = []  # places printed without their secrets, until `take_secret_note`


@contextlib.contextmanager
def serving(place: Place) -> Iterator[Place]:
    """The commands built inside name `place` unless given another one."""
    token = _serving.set(place)
    try:
        yield place
    finally:
        _serving.reset(token)


def serve(place: Place) -> None:
    """From now on in this context, commands name `place` (the command line, once it knows where runs live)."""
    _serving.set(place)


def serving_now() -> Place:
    """The place commands built now name (to hand to a worker process, which serves it too)."""
    return _serving.get()


def take_secret_note() -> bool:
    """Whether a command printed since the last call left a store URL's secret out."""
    found = bool(_secrets_left_out)
    _secrets_left_out.clear()
    return found


def where(place: Place | None = None) -> str:
    """The words that name the store in a command: ` --dir DIR`, ` --store URL` or ""."""
    p = _serving.get() if place is None else place
    if p.secret_left_out:
        _secrets_left_out.append(p)
    return p.flag


def _q(*words: str) -> str:
    return " ".join(shlex.quote(w) for w in words)


def resume(run_id: str, place: Place | None = None) -> str:
    return f"polyloop resume {_q(run_id)}{where(place)}"


def inspect(run_id: str, place: Place | None = None) -> str:
    return f"polyloop inspect {_q(run_id)}{where(place)}"


def mark_resolved(run_id: str, result_id: str, *, executed: bool, place: Place | None = None) -> str:
    flag = "--executed" if executed else "--not-executed"
    return f"polyloop mark-resolved {_q(run_id, result_id)} {flag} --reason TEXT{where(place)}"


def settle(run_id: str, result_id: str, place: Place | None = None) -> tuple[str, str]:
    """The `mark-resolved` commands that settle an unknown or an alert: (executed, not executed)."""
    return (
        mark_resolved(run_id, result_id, executed=True, place=place),
        mark_resolved(run_id, result_id, executed=False, place=place),
    )


def approve(run_id: str, request_id: str, place: Place | None = None) -> str:
    return f"polyloop approve {_q(run_id, request_id)} --reason TEXT{where(place)}"


def deny(run_id: str, request_id: str, place: Place | None = None) -> str:
    return f"polyloop deny {_q(run_id, request_id)} --reason TEXT{where(place)}"


def answer(run_id: str, request_id: str, place: Place | None = None) -> str:
    return f"polyloop answer {_q(run_id, request_id)} TEXT{where(place)}"


def accept_changes(run_id: str, place: Place | None = None) -> str:
    return f"polyloop resume {_q(run_id)} --accept-changes --reason TEXT{where(place)}"


def accept_crash_loop(run_id: str, place: Place | None = None) -> str:
    return f"polyloop resume {_q(run_id)} --accept-crash-loop --reason TEXT{where(place)}"


def decide(run_id: str, kind: str, request_id: str, place: Place | None = None) -> list[tuple[str, str]]:
    """The commands that decide a waiting request (`approval` or `answer`), each with what it means."""
    if kind == "answer":
        return [(answer(run_id, request_id, place), "the model reads TEXT as the answer")]
    return [
        (approve(run_id, request_id, place), "run it (add --args JSON to run edited arguments)"),
        (deny(run_id, request_id, place), "never run it: the model reads the denial"),
    ]


def waiting(run_id: str, waits: Sequence[Mapping[str, Any]], place: Place | None = None) -> list[tuple[str, str]]:
    """The commands that settle what a parked run waits for (`inspect`'s `waiting`), each with what it means."""
    out: list[tuple[str, str]] = []
    for w in waits:
        kind = w.get("kind", "unknown")
        if kind == "crash_loop":
            out.append((accept_crash_loop(run_id, place), "resume it once more, on the record"))
        elif kind in ("approval", "answer"):
            out.extend(decide(run_id, kind, str(w["id"]), place))
        elif kind not in ("unknown", "alert"):
            # A kind of waiting this version does not know: inspect names its commands.
            out.append((inspect(run_id, place), f"{kind}: inspect says how to settle it"))
        else:
            tool = w.get("tool")
            executed, not_executed = settle(run_id, str(w["id"]), place)
            if is_rollback_id(str(w["id"])):  # the rollback is what is in doubt, not the call it rolls back
                out += [(executed, f"the rollback undid {tool}"), (not_executed, "it did not: resume runs it again")]
            else:
                out += [(executed, f"{tool} happened"), (not_executed, f"{tool} did not happen")]
    return out


def is_rollback_id(result_id: str) -> bool:
    """Whether a result id names a rollback (`s3-r1`, `s3-c2-r1`)."""
    return result_id.rsplit("-", 1)[-1].startswith("r")


def batch(
    target: str, goals_file: str, name: str | None, place: Place | None = None, lease: float | None = None
) -> str:
    """The same `polyloop batch` again: how a batch resumes."""
    words = ["polyloop", "batch", shlex.quote(target), shlex.quote(goals_file)]
    if name is not None:
        words += ["--name", shlex.quote(name)]
    if lease is not None:
        words += ["--lease", f"{lease:g}"]
    return " ".join(words) + where(place)
