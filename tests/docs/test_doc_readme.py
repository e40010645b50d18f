"""The README as a newcomer's first minute: two commands first, every how-to reachable, the suite's
duration stated, and run ids that do not collide with the tutorial's when both are followed in one
directory."""

from __future__ import annotations

import re

from docs_helpers import DOCS, ROOT, Command, blocks, commands

README = ROOT / "README.md"
TUTORIAL = DOCS / "tutorials" / "first-crash.md"


def test_the_readme_starts_with_exactly_two_commands_and_the_first_runs_the_shipped_demo() -> None:
    first = blocks(README)[0]
    text = README.read_text(encoding="utf-8")
    assert text.index("```") < text.index("\n## "), "the commands come before the first section"
    lines = [line for line in first.text.splitlines() if line.strip()]
    assert first.lang == "bash" and len(lines) == 2, first.text
    install, suite = lines
    assert install.startswith("python3 -m venv .venv && .venv/bin/pip install") and install.endswith("polyloop demo")
    assert suite == ".venv/bin/python -m pytest"


def test_the_readme_and_the_map_link_every_how_to() -> None:
    readme = README.read_text(encoding="utf-8")
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    for page in sorted((DOCS / "how-to").glob("*.md")):
        assert f"(docs/how-to/{page.name})" in readme, f"the README does not list how-to/{page.name}"
        assert f"(how-to/{page.name})" in index, f"docs/index.md does not list how-to/{page.name}"


def test_the_readme_says_how_long_the_test_suite_takes() -> None:
    assert re.search(r"about\s+\d+\s+minutes\s+on\s+2\s+cores", README.read_text(encoding="utf-8"))


def _run_ids(page) -> set[str]:
    ids = set()
    for item in commands(page):
        if isinstance(item, Command):
            ids.update(re.findall(r"--run-id\s+([\w.-]+)", item.text))
            ids.update(re.findall(r"polyloop (?:inspect|resume|mark-resolved)\s+([\w.-]+)", item.text))
    return ids


def test_the_tutorial_and_the_readme_use_different_run_ids() -> None:
    readme, tutorial = _run_ids(README), _run_ids(TUTORIAL)
    assert readme and tutorial
    assert not readme & tutorial, f"followed in one directory, these collide: {sorted(readme & tutorial)}"
