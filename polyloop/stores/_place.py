"""Where a store spec is, as a printed command names it (`polyloop._log.commands.Place`).

The default place is what a command with no flag opens: $POLYLOOP_STORE,
else $POLYLOOP_DIR, else ./runs, as written there. Any other directory
(the default one named another way too, `--dir /abs/runs`) is named by its
absolute path, so the command works pasted from another directory; a
database is named by its URL without secrets, and not at all when
$POLYLOOP_STORE is that URL (the reader's environment supplies it).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from .._log.commands import DEFAULT, Place
from ._url import redact_url, store_kind

DEFAULT_DIRECTORY = "runs"


def default_spec() -> str:
    """What a command with neither --dir nor --store opens."""
    return os.environ.get("POLYLOOP_STORE") or os.environ.get("POLYLOOP_DIR") or DEFAULT_DIRECTORY


def place_of(spec: str | os.PathLike[str] | None) -> Place:
    """The `Place` of a store spec (a directory or a PostgreSQL URL); `DEFAULT` for None."""
    if spec is None:
        return DEFAULT
    text = os.fspath(spec)
    default = default_spec()
    if store_kind(text) == "postgresql":
        if text == default:
            return DEFAULT
        shown = redact_url(text)
        return Place(f" --store {shlex.quote(shown)}", secret_left_out=shown != text)
    if store_kind(default) == "directory" and Path(text) == Path(default):
        return DEFAULT  # as given by default (or named as the default is): a command with no flag opens it
    return Place(f" --dir {shlex.quote(os.path.abspath(text))}")
