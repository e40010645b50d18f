"""Options several commands share."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from polyloop import default_directory
from polyloop.stores import store_kind

from . import paste
from .complete import run_ids
from .errors import BadInput

RunId = Annotated[
    str, typer.Argument(metavar="ID", help="The run id.", show_default=False, autocompletion=run_ids)
]

Directory = Annotated[
    str | None,
    typer.Option(
        "--dir",
        metavar="DIR",
        help="Where run logs live (a directory of JSONL logs). Default: $POLYLOOP_STORE, "
        "else $POLYLOOP_DIR, else ./runs.",
        show_default=False,
    ),
]

StoreUrl = Annotated[
    str | None,
    typer.Option(
        "--store",
        metavar="URL",
        help="Where runs live instead of --dir: postgresql://user@host:port/dbname (or a "
        "directory). Default: $POLYLOOP_STORE.",
        show_default=False,
    ),
]

Json = Annotated[
    bool,
    typer.Option("--json", help="Print one JSON document on stdout instead of the rendering."),
]


def directory(given: str | None) -> str:
    """The run directory: `--dir`, else `$POLYLOOP_DIR`, else `./runs`."""
    return given if given else default_directory()


def where(directory_given: str | None, store_given: str | None) -> str:
    """Where runs live, as `open_store` takes it: `--store`, `--dir`, `$POLYLOOP_STORE`,
    `$POLYLOOP_DIR`, else `./runs`; refused (exit 2) if it is a URL of a scheme PolyLoop does not serve."""
    if directory_given and store_given:
        raise BadInput("give --dir or --store, not both")
    spec = checked(store_given or directory_given or os.environ.get("POLYLOOP_STORE") or default_directory())
    return paste.serve(spec)  # every command printed from now on names it (when not the default)


def checked(spec: str) -> str:
    """`spec`, once the library has classified it (`StoreUrlError`, exit 2, for `mysql://...`)."""
    store_kind(spec)
    return spec


def is_url(spec: str) -> bool:
    """Whether `spec` names a database rather than a directory."""
    return store_kind(spec) == "postgresql"


def utf8(value: str | None, flag: str) -> str | None:
    """`value`, refused (BadInput) if it is not valid UTF-8 (undecodable bytes in argv)."""
    if value is not None:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise BadInput(f"{flag} is not valid UTF-8 text") from None
    return value


def step_range(given: str | None, all_steps: bool) -> tuple[int, int] | None:
    """`--steps FROM-TO` (or `N`) as a range; `--all` as every step; None for the default."""
    if given is not None and all_steps:
        raise BadInput("--steps and --all: give one, not both")
    if all_steps:
        return (1, 2**62)
    if given is None:
        return None
    first, sep, last = given.partition("-")
    try:
        start, end = int(first), int(last) if sep else int(first)
    except ValueError:
        raise BadInput(f"--steps takes FROM-TO or N (whole numbers), not {given!r}") from None
    if not 1 <= start <= end:
        raise BadInput(f"--steps {given}: FROM must be at least 1 and no more than TO")
    return (start, end)


Inputs = Annotated[
    list[str] | None,
    typer.Option(
        "--input",
        metavar="NAME=PATH",
        help="A file or directory the run depends on (repeatable). Its SHA-256 is recorded "
        "and compared on every resume.",
        show_default=False,
    ),
]


def inputs(given: list[str] | None) -> dict[str, str] | None:
    """`--input NAME=PATH` options as `{name: path}` (None when none was given)."""
    if not given:
        return None
    out: dict[str, str] = {}
    for item in given:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise BadInput(f"--input {item!r}: expected NAME=PATH")
        if name in out:
            raise BadInput(f"--input {name!r} is given twice")
        utf8(path, "--input")
        if not os.path.exists(path):  # before a run id is announced
            raise BadInput(f"--input {name}: no file or directory {path}")
        out[name] = path
    return out


By = Annotated[
    str | None,
    typer.Option("--by", metavar="NAME", help="Who decides (recorded). Default: the OS user and host, user@host.",
                 show_default=False),
]
