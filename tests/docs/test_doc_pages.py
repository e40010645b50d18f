"""The docs hold together: links resolve, the map lists every page, how-to titles are imperative,
and nothing promises more than PolyLoop does."""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import unquote

import pytest
from docs_helpers import DOCS, ROOT, page_id, pages

_FENCED = re.compile(r"^\s*```.*?^\s*```\s*$", re.S | re.M)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REF_LINK = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)", re.M)
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$", re.M)

# Pages other engineers are still writing; a link to one is allowed while it does not exist.
PENDING: set[str] = set()


def _prose(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    return _INLINE_CODE.sub("", _FENCED.sub("", text))


def links(path: Path) -> list[str]:
    prose = _prose(path)
    return _LINK.findall(prose) + _REF_LINK.findall(prose)


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, title in _HEADING.findall(_FENCED.sub("", path.read_text(encoding="utf-8"))):
        s = slug(title)
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


@pytest.mark.parametrize("page", pages(), ids=page_id)
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / unquote(path_part)).resolve() if path_part else page
        rel = os.path.relpath(dest, ROOT)
        if not dest.exists():
            if rel not in PENDING:
                broken.append(f"{target}: no such file {rel}")
            continue
        if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: {rel} has no heading #{anchor}")
    assert not broken, "\n".join(broken)


def test_the_map_links_every_page() -> None:
    index = DOCS / "index.md"
    linked = {(index.parent / t.partition("#")[0]).resolve() for t in links(index) if "://" not in t}
    missing = [page_id(p) for p in sorted(DOCS.rglob("*.md")) if p != index and p.resolve() not in linked]
    assert not missing, f"docs/index.md does not list: {missing}"


# First words of how-to titles. A new how-to with another verb: add it if the title is an order.
IMPERATIVE = {
    "add", "change", "check", "choose", "configure", "declare", "deploy", "guard", "inspect", "keep", "migrate",
    "ride", "decide",
    "move", "operate", "read", "recover", "replace", "require", "resume", "run", "see", "settle", "start", "test", "use",
    "verify", "write",
}


@pytest.mark.parametrize("page", sorted((DOCS / "how-to").glob("*.md")), ids=page_id)
def test_how_to_titles_are_imperative(page: Path) -> None:
    first = page.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("# "), f"{page_id(page)} must open with its title"
    title = first[2:].strip()
    verb = title.split()[0]
    assert verb[0].isupper() and verb.lower() in IMPERATIVE, f"not an order: {title!r}"
    assert not title.endswith("?") and not verb.lower().endswith("ing"), title


def test_nothing_promises_more_than_detection() -> None:
    """The phrase for the guarantee PolyLoop cannot give appears nowhere: not even denied."""
    phrase = re.compile(r"exactly[\s-]+" + "once", re.I)
    skip_dirs = {"__pycache__", "runs", "demo-workspace", "build", "dist", "node_modules"}
    offenders = []
    for where, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in skip_dirs and not d.endswith(".egg-info")]
        for name in files:
            path = Path(where, name)
            if path.suffix not in {".py", ".md", ".toml", ".txt", ".sh", ".json", ".cfg", ""}:
                continue
            if path.stat().st_size > 2_000_000:
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8", errors="ignore").splitlines(), 1):
                if phrase.search(line):
                    offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not offenders, "\n".join(offenders)
