"""Reading the docs as a test sees them: pages, code blocks, shell commands and their expectations.

A page's code blocks are found line by line (fences may be indented, as inside a list). Markers are
HTML comments on the line just before a fence (blank lines between are allowed):

* `<!-- fragment -->` — a ```python block that is part of a larger program: not run on its own.
* `<!-- file: NAME -->` — the block is also saved as NAME in the page's working directory, so later
  blocks and commands of the same page can import or run it.

Shell commands come from two kinds of blocks:

* ```console: every line starting with `$ ` is a command (a trailing `\\` continues it); the lines
  after it, up to the next command, are its output as shown. A console block without any `$ `
  line is a list of commands with no output shown.
* ```bash / ```sh / ```shell: the whole block is one script (so `$?` and `case` work as written).

A command's expected exit code, in this order: a trailing comment `# exits N`; an `[exit N]` line
in its shown output; a crash switch (`POLYLOOP_DEMO_CRASH=`) means the process kills itself
(SIGKILL: 137 from a shell, -9 from Python); otherwise 0.
"""

from __future__ import annotations

import os
import re
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
EXAMPLES = ROOT / "examples"


def pages() -> list[Path]:
    """Every page a reader is sent to: the README, the examples' README and docs/**."""
    return [ROOT / "README.md", EXAMPLES / "README.md", *sorted(DOCS.rglob("*.md"))]


def page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    markers: list[str] = field(default_factory=list)

    @property
    def fragment(self) -> bool:
        return "fragment" in self.markers

    @property
    def file(self) -> str | None:
        for m in self.markers:
            if m.startswith("file:"):
                return m.split(":", 1)[1].strip()
        return None


_FENCE = re.compile(r"^(\s*)```\s*([\w+-]*)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*(.*?)\s*-->\s*$")


def blocks(path: Path) -> list[Block]:
    """The fenced code blocks of a page, in order, with their markers."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    markers: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        m = _FENCE.match(line)
        if m is None:
            mk = _MARKER.match(line)
            if mk:
                markers.append(mk.group(1))
            elif line.strip():
                markers = []
            i += 1
            continue
        indent, lang = m.group(1), m.group(2)
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not re.match(rf"^{re.escape(indent)}```\s*$", lines[j]):
            body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j].lstrip())
            j += 1
        out.append(Block(path, i + 1, lang, "\n".join(body) + "\n", markers))
        markers = []
        i = j + 1
    return out


KILLED = 137  # 128 + SIGKILL, as a shell reports it
CRASH_SWITCH = "POLYLOOP_DEMO_CRASH="
_EXITS = re.compile(r"#\s*exits\s+(\d+)\b")
_EXIT_LINE = re.compile(r"^\[exit (\d+)\]$")


@dataclass
class Command:
    page: Path
    line: int
    text: str  # what the reader types (a script, for bash blocks)
    output: list[str]  # the output lines shown under it (console blocks only)
    expected: int
    script: bool = False

    @property
    def id(self) -> str:
        return f"{page_id(self.page)}:{self.line}"


def command_key(text: str) -> str:
    """A command without its trailing comment and spacing: how the not-run lists name it."""
    return re.sub(r"\s+#[^\"']*$", "", text.strip())


def _expected(text: str, output: list[str]) -> int:
    m = _EXITS.search(text.splitlines()[-1] if text.strip() else "")
    if m is None and len(text.splitlines()) > 1:
        m = next((x for x in map(_EXITS.search, text.splitlines()) if x), None)
    if m:
        return int(m.group(1))
    for line in output:
        e = _EXIT_LINE.match(line.strip())
        if e:
            return int(e.group(1))
    if CRASH_SWITCH in text:
        return KILLED
    return 0


def commands(path: Path) -> list[Command | Block]:
    """The page's shell commands in document order, with its `file:` blocks in between."""
    out: list[Command | Block] = []
    for b in blocks(path):
        if b.file:
            out.append(b)
        if b.lang == "console":
            out.extend(_console(b))
        elif b.lang in ("bash", "sh", "shell"):
            if b.text.strip():
                out.append(Command(path, b.line + 1, b.text, [], _expected(b.text, []), script=True))
    return out


def _console(b: Block) -> list[Command]:
    lines = b.text.splitlines()
    if not any(line.startswith("$ ") for line in lines):
        return [
            Command(b.page, b.line + 1 + n, line, [], _expected(line, []))
            for n, line in enumerate(lines)
            if line.strip() and not line.lstrip().startswith("#")
        ]
    found: list[Command] = []
    n = 0
    while n < len(lines):
        if not lines[n].startswith("$ "):
            n += 1
            continue
        start = n
        text = lines[n][2:]
        while text.endswith("\\") and n + 1 < len(lines):
            n += 1
            text = text[:-1] + "\n" + lines[n]
        n += 1
        output: list[str] = []
        while n < len(lines) and not lines[n].startswith("$ "):
            output.append(lines[n])
            n += 1
        found.append(Command(b.page, b.line + 1 + start, text, output, _expected(text, output)))
    return found


def exit_matches(expected: int, got: int) -> bool:
    if expected == KILLED:
        return got in (KILLED, -signal.SIGKILL)
    return got == expected


# -- comparing shown output with real output ------------------------------------------------

_VOLATILE = [
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z"), "<TIME>"),
    (re.compile(r"run-\d{8}T\d{6}Z-[0-9a-f]{6}"), "run-<ID>"),
    (re.compile(r"pid \d+ on \S+"), "pid <PID>"),
    (re.compile(r"(?<![\w.])/\S*?/(examples/)"), r"<DIR>/\1"),
    (re.compile(r"\bin \d+(\.\d+)?s\b"), "in <SECONDS>s"),
    (re.compile(r"\bby [\w.-]+( at|\))"), r"by <USER>\1"),
]


def normalize(line: str) -> str:
    """One output line with whitespace collapsed and machine- or time-dependent parts masked."""
    for pattern, repl in _VOLATILE:
        line = pattern.sub(repl, line)
    return " ".join(line.split())


# The shell's own report of a killed job: "Killed", or "bash: line 1: 4242 Killed   COMMAND".
_SHELL_KILLED = re.compile(r"(^|\d\s+)Killed(\s|$)")


def line_pattern(shown: str) -> re.Pattern[str]:
    """A shown output line as a pattern over a normalized real line; `...` inside it abridges."""
    parts = [re.escape(part.strip()) for part in normalize(shown).split("...")]
    return re.compile(".*?".join(parts))


def shown_lines(output: list[str]) -> list[str]:
    """The shown output lines a real run must print (abridgements and shell chatter left out)."""
    keep = []
    for line in output:
        s = line.strip()
        if not s or s in ("...", "…") or _EXIT_LINE.match(s) or _SHELL_KILLED.search(s):
            continue
        keep.append(line)
    return keep


BIN = Path(sys.executable).parent

# Nothing from the developer's shell may leak into a documented command (least of all an API key).
LEAKY = ("POLYLOOP_", "OPENAI_", "ANTHROPIC_", "PAYMENTS_", "PYTEST_", "FORCE_COLOR", "COLUMNS", "VIRTUAL_ENV", "OTEL_")


def doc_env(**extra: str) -> dict[str, str]:
    """The environment of a reader's shell: this interpreter's bin first on PATH, user `alice`.

    The user name is fixed because `mark-resolved` records and prints who decided.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(LEAKY)}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["LOGNAME"] = env["USER"] = "alice"
    env.update(extra)
    return env
