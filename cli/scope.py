"""What a command knows so far: shared by `errors` (which maps a failure to its exit code)
and the renderers (which say what to do next), so neither imports the other for it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class Scope:
    """What a command knows so far, so a failure can say what to do next."""

    json: bool = False
    json_lines: bool = False  # stdout is a stream of JSON lines: an error is one line of it
    directory: str | None = None
    run_id: str | None = None
    resumable: bool = False  # the command runs the run: an interruption leaves it resumable
    # With --json, for a command that acted on a run: the document to print when it fails
    # (the run as it stands, with the error), given the error object; None to print the error alone.
    document: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None
