"""Every shell command shown in the README and the docs runs, in order, with the exit code shown.

Each page gets a fresh directory that looks like a checkout after the README's first command
(`examples/` and `.venv/` are there, nothing else), and its commands run there one after another,
so the state a page builds up (run → inspect → mark-resolved → resume → verify) carries from one
command to the next, as it does for a reader. Every output line shown under a command must also
appear in what the command really printed (times, users, generated ids, pids and absolute paths
masked; `...` abridges, alone on a line or inside one).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from docs_helpers import doc_env
from support import forking
from docs_helpers import (
    ROOT,
    Block,
    Command,
    command_key,
    commands,
    exit_matches,
    line_pattern,
    normalize,
    page_id,
    pages,
    shown_lines,
)

TIMEOUT = 60

# Commands that are shown but not run here, each with the reason. Keep this list short.
NOT_RUN = {
    ".venv/bin/python -m pytest": "the test suite itself (.ci/run runs it)",
    "python3 -m venv .venv && .venv/bin/pip install -q -e .": "installing: .ci/run does the same",
    "pip install 'polyloop[openai]'": "installs from the package index; the test extra already has openai",
    "polyloop run agent.py:agent --run-id notes-1 --goal \"summarise notes.txt\"": "needs a real model server",
    "polyloop run examples/openai_agent.py:agent --run-id llm-1 --goal \"write meeting notes to notes.txt, "
    "then collect the TODO lines in todo.txt\"": "needs a real model server (tests/examples runs --fake)",
    "python benchmarks/run.py": "takes minutes (tests/test_benchmarks_smoke.py runs --quick)",
    "python benchmarks/run.py --quick": "tests/test_benchmarks_smoke.py runs it",
    "python benchmarks/run.py --only steps": "takes minutes",
    "python benchmarks/run.py --update-docs": "takes minutes and rewrites docs/performance.md",
    "python -m venv .venv-peers && .venv-peers/bin/pip install -e '.[peers]'": "installs the benchmark peers",
    "POLYLOOP_RELIABILITY_REPORT=reliability.json .venv/bin/python -m pytest tests/crash tests/property -q -m \"\"":
        "part of the test suite itself",
    ".venv/bin/python tests/crash/report.py reliability.json docs/reliability.md":
        "rewrites docs/reliability.md from the figures of that run",
    "polyloop --install-completion": "writes the reader's shell start-up file (test_cli_completion.py "
        "sources the script in bash)",
    "polyloop --show-completion > ~/.polyloop-completion.sh": "writes into the reader's home directory",
    "polyloop batch rollout.py:agent evals.txt --store postgresql://postgres@127.0.0.1:5432/test":
        "its fixed run ids would meet the last docs run's in the shared database "
        "(tests/stores/postgres/test_pg_batch.py runs batches on PostgreSQL)",
}

# Commands run in a shorter form: the README's first command installs, then runs the demo.
INSTEAD = {
    "python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]' && .venv/bin/polyloop demo": (
        ".venv/bin/polyloop demo",
        "the install part is what .ci/run does (tests/packaging installs the wheel outside the repository)",
    ),
}


def _crashed_demo(workdir: Path, env: dict[str, str]) -> None:
    """The state the CLI reference's crash walkthrough leaves: run `demo`, killed after its write."""
    _polyloop(workdir, env | {"POLYLOOP_DEMO_CRASH": "1"}, "run", "examples/demo.py:agent",
              "--run-id", "demo", "--goal", "write up the notes", expect=-9)


def _nightly_logs(workdir: Path, env: dict[str, str]) -> None:
    """The CI directory of the CLI reference: nightly-2 has a torn tail, line 7 of nightly-3 is overwritten."""
    for n in (1, 2, 3):
        _polyloop(workdir, env, "run", "examples/demo.py:agent", "--run-id", f"nightly-{n}",
                  "--goal", "nightly notes", expect=0)
    torn = workdir / "runs" / "nightly-2.jsonl"
    data = torn.read_bytes()
    last = data.rstrip(b"\n").rfind(b"\n") + 1
    torn.write_bytes(data[: last + (len(data) - last) // 2])
    bad = workdir / "runs" / "nightly-3.jsonl"
    lines = bad.read_bytes().splitlines(keepends=True)
    lines[6] = b"#" * (len(lines[6]) - 1) + b"\n"
    bad.write_bytes(b"".join(lines))


def _polyloop(workdir: Path, env: dict[str, str], *args: str, expect: int) -> None:
    done = subprocess.run(["polyloop", *args], cwd=workdir, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    assert done.returncode == expect, done.stderr


# What a page needs that its own commands do not make: its environment, and setup that runs just
# before the first command whose key is given (None: before the page's first command).
PAGE_ENV: dict[str, dict[str, str]] = {
    "docs/reference/cli.md": {"POLYLOOP_DIR": "runs"},
    "docs/reference/json.md": {"RUN": "demo"},
    "docs/reference/exit-codes.md": {"RUN": "demo"},
}
SETUP: dict[tuple[str, str | None], Callable[[Path, dict[str, str]], None]] = {
    ("docs/reference/cli.md", "polyloop verify runs/"): _nightly_logs,
    ("docs/reference/json.md", None): _crashed_demo,
    ("docs/reference/exit-codes.md", None): _crashed_demo,
    ("docs/reference/log-format.md", None): _crashed_demo,
}

PAGES = [p for p in pages() if any(isinstance(c, Command) for c in commands(p))]


def _runnable(command: Command) -> str | None:
    """The text to run, with not-run lines of a script left out; None when nothing is left."""
    key = command_key(command.text)
    if key in NOT_RUN:
        return None
    if key in INSTEAD:
        return INSTEAD[key][0]
    if not command.script:
        return command.text
    kept = []
    for line in command.text.splitlines():
        k = command_key(line)
        if k in NOT_RUN:
            continue
        kept.append(INSTEAD[k][0] if k in INSTEAD else line)
    text = "\n".join(kept)
    return text if any(line.strip() and not line.lstrip().startswith("#") for line in kept) else None


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_command_of_the_page_runs_as_shown(page: Path, workdir_factory: Callable[[str], Path]) -> None:
    workdir = workdir_factory("work")
    pid = page_id(page)
    env = doc_env(**PAGE_ENV.get(pid, {}))
    env["PATH"] = forking.shell_path(env["PATH"])  # each `polyloop` a command starts: forked, not started
    failures: list[str] = []
    setups = {key: fn for (p, key), fn in SETUP.items() if p == pid}
    no_jq: list[str] = []
    for item in commands(page):
        if isinstance(item, Block):
            (workdir / item.file).write_text(item.text, encoding="utf-8")  # type: ignore[operator]
            continue
        for key in [k for k in setups if k is None or k == command_key(item.text)]:
            setups.pop(key)(workdir, env)
        text = _runnable(item)
        if text is None:
            continue
        if shutil.which("jq", path=env["PATH"]) is None and "jq " in text:
            no_jq.append(item.id)
            continue
        try:
            done = subprocess.run(["bash", "-o", "pipefail", "-c", text], cwd=workdir, env=env,
                                  capture_output=True, text=True, timeout=TIMEOUT,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            failures.append(f"{item.id}: `{text}` took over {TIMEOUT} s")
            continue
        printed = done.stdout + done.stderr
        if not exit_matches(item.expected, done.returncode):
            failures.append(f"{item.id}: `{text}` exited {done.returncode}, the page shows "
                            f"{item.expected}\n{printed}")
            continue
        real = [normalize(line) for line in printed.splitlines()]
        for line in shown_lines(item.output):
            if not any(line_pattern(line).search(got) for got in real):
                failures.append(f"{item.id}: `{text}` did not print the shown line\n  {line}\n"
                                f"it printed:\n{printed}")
                break
    assert not failures, "\n\n".join(failures)
    assert not setups, f"setup never ran (its command is gone from the page?): {list(setups)}"
    if no_jq:
        pytest.skip(f"jq is not installed: {len(no_jq)} commands not run ({', '.join(no_jq)})")


def test_every_not_run_command_is_still_shown_somewhere() -> None:
    shown: set[str] = set()
    for page in pages():
        for item in commands(page):
            if isinstance(item, Command):
                shown.add(command_key(item.text))
                shown.update(command_key(line) for line in item.text.splitlines())
    stale = sorted(set(NOT_RUN) - shown) + sorted(set(INSTEAD) - shown)
    assert not stale, f"no page shows these any more; drop them from the lists: {stale}"


def test_the_readme_walkthrough_is_checked_end_to_end() -> None:
    """The newcomer's path: the README's commands are there, in the workflow's order."""
    keys = [command_key(c.text) for c in commands(ROOT / "README.md") if isinstance(c, Command)]
    order = ["POLYLOOP_DEMO_CRASH=1 polyloop demo", "polyloop inspect demo", "polyloop mark-resolved demo",
             "polyloop resume demo", "polyloop verify runs/"]
    positions = [next(i for i, k in enumerate(keys) if step in k) for step in order]
    assert positions == sorted(positions), keys
    assert os.path.exists(ROOT / ".ci" / "run"), "the README's first command is run by .ci/run"
