"""The core never imports OpenTelemetry: only `polyloop.otel` does (the `otel` extra)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_no_module_but_polyloop_otel_imports_opentelemetry() -> None:
    offenders = []
    for folder in (ROOT / "polyloop", ROOT / "cli"):
        for path in folder.rglob("*.py"):
            if path.parent == ROOT / "polyloop" / "otel":
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                if any(n.split(".")[0] == "opentelemetry" for n in names):
                    offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


def test_a_run_without_tracing_loads_no_opentelemetry_module() -> None:
    code = (
        "import asyncio, sys, polyloop, polyloop.stores, polyloop_cli.main, polyloop_cli.run, polyloop_cli.resume\n"
        "from polyloop import Agent, ScriptedModel\n"
        "from polyloop.testing import MemoryStore\n"
        "agent = Agent(model=ScriptedModel([{'final': 'ok'}]))\n"
        "asyncio.run(agent.run('g', run_id='r', store=MemoryStore()))\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    env = {"PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
