"""Safe text and terminal output: the one gate untrusted text passes on its way to a terminal.

A log holds whatever a model or a tool produced. Everything read from a log,
an exception message or a path passes through `safe_text` before it reaches
a terminal, and is printed as a rich `Text` (never parsed as markup), so
`[red]`, `[/x]`, ESC sequences and bidi overrides are shown, inert, as
written. `--json` output is written with the standard `json` module with
ASCII escapes and never goes through rich.

The renderers above this module say what each command prints:
`failure_view` (failures), `waits_view` (what waits for a person),
`run_view` (run and resume), `inspect_view` (`inspect`), `logs_view`
(`ls` and `verify`), `batch_view` (`batch`); `paste` builds every command
an operator is told to run.
"""

from __future__ import annotations

import json
import os
import re
import sys
import unicodedata
from typing import Any, TextIO

import orjson
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.text import Text

# Control (Cc), format (Cf: bidi overrides, zero-width joiners), surrogates
# (Cs: unprintable) and line/paragraph separators (Zl, Zp).


# Control (Cc), format (Cf: bidi overrides, zero-width joiners), surrogates
# (Cs: unprintable) and line/paragraph separators (Zl, Zp).
_UNSAFE = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


CLIP = 160


SHOWN_PROBLEMS = 5  # per log in a human rendering; --json lists every one


def safe_text(value: object, *, one_line: bool = False) -> str:
    """`value` as text that cannot drive a terminal.

    Characters of Unicode categories Cc, Cf, Cs, Zl and Zp become visible
    escapes (`\\x1b`, `\\u202e`, `\\r`); newline and tab are kept, unless
    `one_line` asks for them as `\\n` and `\\t` too.
    """
    text = value if isinstance(value, str) else str(value)
    if text.isprintable():
        return text  # fast path: isprintable() is False for every unsafe category
    parts = []
    for ch in text:
        if ch in "\n\t" and not one_line:
            parts.append(ch)
        elif ch in _NAMED:
            parts.append(_NAMED[ch])
        elif unicodedata.category(ch) in _UNSAFE:
            code = ord(ch)
            if code <= 0xFF:
                parts.append(f"\\x{code:02x}")
            elif code <= 0xFFFF:
                parts.append(f"\\u{code:04x}")
            else:
                parts.append(f"\\U{code:08x}")
        else:
            parts.append(ch)
    return "".join(parts)


def clip(value: object, limit: int = CLIP) -> str:
    """Untrusted text, made safe and cut to `limit` characters on one line."""
    text = safe_text(value, one_line=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def safe(value: object, style: str = "") -> Text:
    """Untrusted text as a rich `Text` (never parsed as markup)."""
    return Text(safe_text(value), style=style)


class OutputClosed(Exception):
    """Whoever read our output stopped reading (`polyloop ls | head -3`): end quietly."""


def silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


class _Console(Console):
    def on_broken_pipe(self) -> None:
        # rich raises SystemExit(1) here, which would read as a sys.exit() of the agent's code.
        silence_stdout()
        raise OutputClosed


def console(stream: TextIO, **options: Any) -> Console:
    """A rich console for our output: no markup, no emoji, a closed pipe ends us quietly."""
    return _Console(file=stream, markup=False, emoji=False, highlight=False, **options)


def _console(stream: TextIO) -> Console:
    width = None
    if not stream.isatty() and "COLUMNS" not in os.environ:
        width = 100
    return console(stream, width=width, soft_wrap=False)


def out() -> Console:
    return _console(sys.stdout)


def err() -> Console:
    return _console(sys.stderr)


def say(console: Console, *parts: str | tuple[str, str] | Text) -> None:
    """One line of (text, style) parts, each made safe, printed and flushed."""
    text = Text()
    for part in parts:
        if isinstance(part, Text):
            text.append_text(part)
        elif isinstance(part, tuple):
            text.append(safe_text(part[0]), style=part[1])
        else:
            text.append(safe_text(part))
    console.print(text, soft_wrap=True)
    console.file.flush()


def more_problems(console: Console, total: int) -> None:
    """The count of problems a human rendering left out."""
    if total > SHOWN_PROBLEMS:
        say(console, (f"          … and {total - SHOWN_PROBLEMS} more problems (--json lists them all)", "dim"))


def print_json(doc: Any, *, lines: bool = False) -> None:
    """Write one JSON document to stdout (never through rich), all ASCII.

    Non-ASCII characters are written as `\\uXXXX` escapes, so bidi overrides
    and C1 controls from a log cannot reach a terminal raw. orjson keeps a
    100,000-step `inspect --json` fast. `lines`: on one line, for a command
    whose stdout is a stream of JSON lines (`polyloop worker --json`).
    """
    text = orjson.dumps(doc, option=0 if lines else orjson.OPT_INDENT_2, default=str).decode()
    if not text.isascii():
        text = _NON_ASCII.sub(_json_escape, text)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


_NON_ASCII = re.compile(r"[^\x00-\x7f]")


def _json_escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def compact(value: Any) -> str:
    """JSON arguments on one line, as a person reads them."""
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)


def worker_bar(label: str) -> Progress:
    """A transient progress bar on stderr for work spread over worker processes.

    No refresh thread: the work forks worker processes, and forking while
    another thread holds a lock is how children deadlock.
    """
    return Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        console=console(sys.stderr),
        transient=True,
        auto_refresh=False,
    )
