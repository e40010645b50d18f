"""The how-tos for the model adapters stay true: their Python blocks run as written."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from polyloop import JsonlStore, ModelCallResult
from support import ROOT

HOWTOS = ROOT / "docs" / "how-to"


def _run_blocks(page: str, tmp_path: Path) -> dict[str, object]:
    """Execute the page's two Python blocks in one namespace, then the test function they define."""
    path = HOWTOS / page
    blocks = re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 2
    namespace: dict[str, object] = {"__name__": "howto"}
    for block in blocks:
        exec(compile(block, str(path), "exec"), namespace)
    assert callable(namespace["agent"])  # it reads the environment only when called
    asyncio.run(namespace["test_my_agent"](tmp_path))  # type: ignore[operator]
    return namespace


def test_the_openai_howto_runs(tmp_path: Path) -> None:
    _run_blocks("use-an-openai-compatible-model.md", tmp_path)


def test_the_anthropic_howto_runs_and_its_turn_of_two_calls_is_recorded(tmp_path: Path) -> None:
    pytest.importorskip("anthropic")
    namespace = _run_blocks("use-an-anthropic-model.md", tmp_path)
    schema = namespace["read_file"].spec()["parameters"]  # type: ignore[attr-defined]
    assert schema["properties"]["path"]["description"].startswith("the file to read")
    records = asyncio.run(JsonlStore(tmp_path / "runs").read_log("t1"))
    decisions = [r.output for r in records if isinstance(r, ModelCallResult) and r.output]
    assert [Path(c["args"]["path"]).name for c in decisions[0]["tool_calls"]] == ["a.txt", "b.txt"]
