"""The shape of the code: one way down the layers, no import circles, modules a reader can hold.

The layers (docs/explanation/design-choices.md, "The layers"), from the ground up:

    _log, _files          the log format as a contract; a leaf helper for user paths
    stores/*, _recovery   storage behind the ports; pure recovery (records → verdict → next move)
    _trace                a run's trace from its records (pure; polyloop.otel carries it out)
    _run                  carries out the next move through the ports
    _operate              people's tools over a log
    _fleet                many runs
    facades               polyloop, polyloop.stores, polyloop.testing, polyloop.openai, ...
    polyloop_cli          the command line, an honest client of the library

Every import counts: at module level, inside a function, under TYPE_CHECKING. The graph is read
with `ast`, so nothing is imported to check it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"polyloop": ROOT / "polyloop", "polyloop_cli": ROOT / "cli"}
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80

# The rank of each layer; a module may import its own layer and those below it.
LAYERS: tuple[tuple[str, int], ...] = (
    ("polyloop._files", 0),
    ("polyloop._log", 0),
    ("polyloop.stores.", 1),  # the store modules; the package facade is below, with the facades
    ("polyloop._recovery", 1),
    ("polyloop._trace", 1),  # a run's trace from its records: pure, like recovery
    ("polyloop._run", 2),
    ("polyloop._operate", 3),
    ("polyloop._fleet", 4),
    ("polyloop_cli", 6),
    ("polyloop.__main__", 6),  # `python -m polyloop` is the command line
    ("polyloop", 5),  # the public facades: polyloop, polyloop.stores, polyloop.testing, adapters
)
# Side by side, and still never importing each other: storage and recovery.
APART = (("polyloop.stores.", "polyloop._recovery"), ("polyloop._recovery", "polyloop.stores"))


def _modules() -> dict[str, Path]:
    found = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = [package, *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _targets(module: str, path: Path) -> Iterator[str]:
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            names = [f"{source}.{alias.name}" for alias in node.names] + [source]
        else:
            continue
        for name in names:
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name and name != module:
                yield name


def _graph() -> dict[str, set[str]]:
    graph = {m: set(_targets(m, p)) for m, p in MODULES.items()}
    # A package importing its own submodules (to re-export them) is not an arrow of its own.
    return {m: {t for t in ts if not t.startswith(m + ".")} for m, ts in graph.items()}


def _rank(module: str) -> int:
    return next(rank for prefix, rank in LAYERS if module == prefix or module.startswith(prefix + ".")
                or (prefix.endswith(".") and module.startswith(prefix)))


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_there_are_no_import_circles() -> None:
    assert _cycles(_graph()) == []


def test_every_import_points_down_the_layers() -> None:
    upward = sorted(
        f"{m} -> {t}" for m, ts in _graph().items() for t in ts
        if _rank(t) > _rank(m) or any(m.startswith(a) and t.startswith(b) for a, b in APART)
    )
    assert upward == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_a_module_is_short_enough_to_hold_in_your_head(module: str) -> None:
    path = MODULES[module]
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{path.relative_to(ROOT)} has {lines} lines"
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert long == [], f"{path.relative_to(ROOT)}: {', '.join(long)}"
