"""The how-to for the Anthropic adapter stays true: its Python blocks run as written."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from polyloop import JsonlStore, ModelCallResult

HOWTO = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "use-an-anthropic-model.md"


def test_the_python_blocks_of_the_howto_run(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", HOWTO.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 2
    namespace: dict[str, object] = {"__name__": "howto"}
    for block in blocks:
        exec(compile(block, str(HOWTO), "exec"), namespace)
    agent = namespace["agent"]  # the agent function reads the environment only when called
    assert callable(agent)
    tool = namespace["read_file"]
    assert tool.spec()["parameters"]["properties"]["path"]["description"].startswith("the file to read")  # type: ignore[attr-defined]
    asyncio.run(namespace["test_my_agent"](tmp_path))  # type: ignore[operator]
    records = asyncio.run(JsonlStore(tmp_path / "runs").read_log("t1"))
    decisions = [r.output for r in records if isinstance(r, ModelCallResult) and r.output]
    assert [c["args"]["path"][-5:] for c in decisions[0]["tool_calls"]] == ["a.txt", "b.txt"]
