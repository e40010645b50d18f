"""`polyloop._recovery` is pure: records in, a verdict and the planner's next move out.

Read from the source with `ast`, so every import counts: at the top of a
module, inside a function and under `TYPE_CHECKING` alike. No I/O, no
asyncio, no store and no layer above (`_run`, `_operate`, `_fleet`); and
the package's own modules import one another one way down, without a circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import polyloop._recovery

PACKAGE = "polyloop._recovery"
ROOT = Path(polyloop._recovery.__file__).parent
MODULES = sorted(ROOT.glob("*.py"))

FORBIDDEN = (
    "asyncio", "os", "io", "pathlib", "socket", "subprocess", "threading",
    "importlib",  # an import by name would dodge every check here
    "polyloop.stores", "polyloop._run", "polyloop._operate", "polyloop._fleet",
)


def _name(path: Path) -> str:
    return f"{PACKAGE}.{path.stem}" if path.stem != "__init__" else PACKAGE


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in the module, wherever it is."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = PACKAGE.split(".")
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = ".".join(package[: len(package) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            found.append((node.lineno, base))
            # `from .. import stores` names a module in the `names`, not in `module`.
            found += [(node.lineno, f"{base}.{a.name}") for a in node.names if a.name != "*"]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "__import__":
            found.append((node.lineno, "__import__"))
    return found


def _forbidden(module: str) -> bool:
    return module == "__import__" or any(module == f or module.startswith(f + ".") for f in FORBIDDEN)


def test_the_package_has_modules():
    assert {"state", "walker", "verdict", "plan"} <= {p.stem for p in MODULES}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_a_recovery_module_imports_no_io_and_no_layer_above(path):
    bad = [f"{path.name}:{line}: {module}" for line, module in imports_of(path) if _forbidden(module)]
    assert not bad, "polyloop._recovery must stay pure:\n" + "\n".join(bad)


def test_the_checker_sees_imports_inside_functions_and_type_checking(tmp_path):
    src = tmp_path / "sample.py"
    src.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from .._run.loop import _Run\n"
        "def f():\n    import asyncio\n    from .. import stores\n    return __import__('os')\n",
        encoding="utf-8",
    )
    found = {module for _, module in imports_of(src) if _forbidden(module)}
    assert {"polyloop._run.loop", "asyncio", "polyloop.stores", "__import__"} <= found


def test_the_modules_of_the_package_import_one_another_one_way_down():
    graph: dict[str, set[str]] = {}
    names = {_name(p) for p in MODULES}
    for path in MODULES:
        graph[_name(path)] = {m for _, m in imports_of(path) if m in names and m != _name(path)}
    visiting: list[str] = []
    done: set[str] = set()

    def visit(module: str) -> None:
        if module in done:
            return
        assert module not in visiting, "an import circle: " + " -> ".join(visiting[visiting.index(module):] + [module])
        visiting.append(module)
        for dep in sorted(graph[module]):
            visit(dep)
        visiting.pop()
        done.add(module)

    for module in sorted(graph):
        visit(module)
