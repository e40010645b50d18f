"""Who settles something and why, as a person gives them (SPEC: who defaults to the OS user and host).

Every command that records a person's decision (approve, deny, answer,
mark-resolved, an accepted checkpoint change, a lifted crash loop) takes
its `by` and `reason` through `said`, so a blank one is refused the same
way everywhere: before anything is read or written.
"""

from __future__ import annotations

import getpass
import socket
import unicodedata

from .errors import InvalidInputError

REASON = "the reason (--reason)"
BY = "who decides (--by)"
_UNSEEN = ("Cc", "Cf")  # control and format characters: nothing a reader sees as words
# Every placeholder the command line prints (its help's metavars, and the `--reason TEXT`
# / `--by NAME` of the commands it prints), case-sensitive as printed: pasted unedited,
# it would put no reason and no one on the record.
PLACEHOLDERS = frozenset({
    "TEXT", "NAME", "ID", "RUN", "RUN_ID", "RESULT_ID", "REQUEST_ID", "DIR", "URL", "JSON", "HEX", "N", "P",
    "PATH", "TARGET", "GOALS_FILE", "STATUS", "SECONDS", "FROM-TO", "NAME=PATH", "REASON", "[DIR]", "[TARGET]",
})


def default_by() -> str:
    """`user@host` of this process; `unknown@host` where the user has no name (a bare container uid)."""
    try:
        user = getpass.getuser()
    except Exception:  # getpass raises OSError or KeyError, depending on the platform
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def said(value: str | None, what: str, *, required: bool = False) -> str | None:
    """`value` as a person gave it; refused when given but blank, or when required and not given.

    Blank is empty text, or text of nothing but whitespace and control or
    format characters (Unicode Cc and Cf: invisible, or escapes on a
    terminal): on the record it would name no one or give no reason. So is
    a bare placeholder the command line prints (`TEXT`, `NAME`, any metavar
    of its help; case-sensitive, surrounding whitespace ignored): a printed
    command pasted without filling it in.

    Raises:
        InvalidInputError: `value` is blank, a bare placeholder, not text, or
            None while `required`.
    """
    if value is None:
        if required:
            raise InvalidInputError(f"{what} is required: it is written to the log")
        return None
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be text, not {type(value).__name__}")
    if all(ch.isspace() or unicodedata.category(ch) in _UNSEEN for ch in value):
        raise InvalidInputError(f"{what} is blank: give it in words (it is written to the log)")
    return filled(value, what)


def filled(value: str, what: str) -> str:
    """`value`, refused when it is a bare placeholder the command line prints (`TEXT`, `NAME`, ...).

    Raises:
        InvalidInputError: `value` (surrounding whitespace ignored) is one of `PLACEHOLDERS`.
    """
    if value.strip() in PLACEHOLDERS:
        raise InvalidInputError(
            f"{what} is the placeholder {value.strip()!r} of a printed command: replace it with your own words "
            "(it is written to the log)"
        )
    return value


def settled_by(by: str | None) -> str:
    """Who a settlement is by: `by` as given (refused when blank), else `default_by()`."""
    return said(by, BY) or default_by()
