"""The Python API reference cannot drift: every public name is there, with its real signature,
and the error tree and exit codes are the code's."""

from __future__ import annotations

import inspect
import re

import polyloop
import polyloop.anthropic
import polyloop.durable
import polyloop.mcp
import polyloop.openai
import polyloop.otel
import polyloop.pydantic_ai
import polyloop.stores
import polyloop.testing
import pytest
from docs_helpers import DOCS
from polyloop_cli import errors as cli_errors

PAGE = DOCS / "reference" / "python-api.md"
TEXT = PAGE.read_text(encoding="utf-8")
MODULES = [polyloop, polyloop.testing, polyloop.stores, polyloop.openai, polyloop.anthropic, polyloop.mcp, polyloop.otel,
           polyloop.durable, polyloop.pydantic_ai]
PUBLIC = {(m.__name__, name): getattr(m, name) for m in MODULES for name in m.__all__}


@pytest.mark.parametrize(("module", "name"), sorted(PUBLIC), ids=lambda v: v)
def test_every_public_name_is_documented(module: str, name: str) -> None:
    assert re.search(rf"`(await )?{re.escape(name)}\b", TEXT), f"{module}.{name} is not in {PAGE.name}"


def _params(text: str) -> list[str]:
    """`a, b=1, *, c="x"` as tokens: names, `*`, `/`, with defaults normalized."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip().replace("'", '"') for p in parts if p.strip()]


def _real_params(obj: object) -> list[str]:
    tokens: list[str] = []
    star = False
    params = [p for p in inspect.signature(obj).parameters.values() if p.name != "self"]
    for i, p in enumerate(params):
        if p.kind is p.KEYWORD_ONLY and not star:
            tokens.append("*")
            star = True
        if p.kind is p.VAR_POSITIONAL:
            star = True
        default = "" if p.default is p.empty or callable(p.default) else "=" + repr(p.default).replace("'", '"')
        tokens.append(p.name + default)
        if p.kind is p.POSITIONAL_ONLY and (i + 1 == len(params) or params[i + 1].kind is not p.POSITIONAL_ONLY):
            tokens.append("/")
    return tokens


def _entries() -> list[tuple[str, str]]:
    """(name, signature text) for every `### name` followed by a `name(...)` line."""
    found = re.findall(r"^### (\w+)\n\n`(?:await )?(\w+)\((.*)\)`\s*$", TEXT, re.M)
    return [(heading, params) for heading, called, params in found if heading == called]


def test_signatures_are_the_real_ones() -> None:
    by_name = {name: obj for (_, name), obj in PUBLIC.items()}
    checked, wrong = 0, []
    for name, shown in _entries():
        real = _real_params(by_name[name])
        if _params(shown) != real:
            wrong.append(f"{name}: the page shows ({shown}), the code has ({', '.join(real)})")
        checked += 1
    assert not wrong, "\n".join(wrong)
    assert checked >= 30, f"only {checked} signatures found: is the page's format still `### name` + `name(...)`?"


def _tree() -> list[tuple[int, str]]:
    block = TEXT[TEXT.index("## Errors"):]
    block = block[block.index("```text\n") + len("```text\n"):]
    block = block[: block.index("```")]
    nodes = []
    for line in block.splitlines():
        m = re.match(r"^([│ ]*)(?:[├└]── )?(\w+)", line)
        assert m, line
        depth = 0 if not line.startswith(("├", "└", "│", " ")) else len(m.group(1)) // 4 + 1
        nodes.append((depth, m.group(2)))
    return nodes


def _error_class(name: str) -> type:
    for m in (polyloop, polyloop.openai):
        if hasattr(m, name):
            return getattr(m, name)
    raise AssertionError(f"the error tree names {name}, which is not public")


def test_the_error_tree_is_the_class_hierarchy() -> None:
    nodes = _tree()
    assert nodes[0] == (0, "PolyLoopError")
    parents: dict[int, str] = {}
    for depth, name in nodes:
        cls = _error_class(name)
        if depth:
            parent = _error_class(parents[depth - 1])
            assert cls.__bases__[0] is parent, f"{name} is drawn under {parent.__name__}"
        parents[depth] = name
    drawn = {name for _, name in nodes}
    public_errors = {
        name for m in (polyloop, polyloop.openai) for name in m.__all__
        if isinstance(getattr(m, name), type) and issubclass(getattr(m, name), polyloop.PolyLoopError)
    }
    assert public_errors == drawn, f"missing from the tree: {public_errors - drawn}"


def test_the_error_table_gives_the_cli_exit_codes() -> None:
    rows = re.findall(r"^\| `(\w+)` \|.*\| (\d+) \|$", TEXT, re.M)
    assert len(rows) >= 12
    for name, code in rows:
        cls = _error_class(name)
        real = next(c for kind, c in cli_errors._CODES if issubclass(cls, kind))
        assert int(code) == real, f"{name}: the page says exit {code}, the CLI gives {real}"
