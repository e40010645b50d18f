"""Output the docs show for a run in progress is real.

A block preceded by `<!-- active-run: ARGS -->` shows what `polyloop ARGS` prints while another
process is in the middle of run `slow`, inside a `safe` tool called `wait`. Such output cannot come
from a command run in the page's order, so this test starts that process, holds it inside the
tool, runs each command and compares.
"""

from __future__ import annotations

import shlex
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from docs_helpers import doc_env
from docs_helpers import blocks, line_pattern, normalize, page_id, pages, shown_lines

SLOW = '''
import os, time
from polyloop import Agent, ScriptedModel, tool

@tool(replay="safe")
def wait(until: str) -> str:
    """Wait until a file exists."""
    deadline = time.monotonic() + 60
    while not os.path.exists(until) and time.monotonic() < deadline:
        time.sleep(0.02)
    return "waited"

agent = Agent(model=ScriptedModel([{"tool": "wait", "args": {"until": "release"}}, {"final": "done"}]), tools=[wait])
'''

EXPECTED_EXIT = {"inspect": 0, "resume": 2, "mark-resolved": 2}


def _shown() -> list[tuple[str, str, list[str]]]:
    found = []
    for page in pages():
        for b in blocks(page):
            for m in b.markers:
                if m.startswith("active-run:"):
                    found.append((f"{page_id(page)}:{b.line}", m.split(":", 1)[1].strip(), b.text.splitlines()))
    return found


def test_output_shown_for_an_active_run_is_real(workdir_factory: Callable[[str], Path]) -> None:
    shown = _shown()
    assert shown, "no page shows an active run any more: drop this test"
    workdir = workdir_factory("work")
    (workdir / "slow.py").write_text(SLOW, encoding="utf-8")
    env = doc_env()
    holder = subprocess.Popen(["polyloop", "run", "slow.py:agent", "--run-id", "slow", "--goal", "take a while"],
                              cwd=workdir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              stdin=subprocess.DEVNULL)
    try:
        log = workdir / "runs" / "slow.jsonl"
        deadline = time.monotonic() + 60
        while not (log.exists() and b'"result_id":"s1-a1"' in log.read_bytes()):
            assert holder.poll() is None and time.monotonic() < deadline, "the slow run never reached its tool"
            time.sleep(0.02)
        failures = []
        for where, args, lines in shown:
            done = subprocess.run(["polyloop", *shlex.split(args)], cwd=workdir, env=env, capture_output=True,
                                  text=True, timeout=60, stdin=subprocess.DEVNULL)
            if done.returncode != EXPECTED_EXIT[shlex.split(args)[0]]:
                failures.append(f"{where}: `polyloop {args}` exited {done.returncode}\n{done.stderr}")
            real = [normalize(x) for x in (done.stdout + done.stderr).splitlines()]
            for line in shown_lines(lines):
                if not any(line_pattern(line).search(got) for got in real):
                    failures.append(f"{where}: `polyloop {args}` did not print\n  {line}\n{done.stdout}{done.stderr}")
        assert not failures, "\n\n".join(failures)
    finally:
        (workdir / "release").touch()
        try:
            holder.wait(timeout=60)
        finally:
            if holder.poll() is None:
                holder.kill()
                holder.wait()
    assert holder.returncode == 0
