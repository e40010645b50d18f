"""Every ```python block of the README and the docs runs on its own, in a fresh directory.

A block preceded by `<!-- fragment -->` is part of a larger program and is not run alone. A block
preceded by `<!-- file: NAME -->` is saved as NAME for later blocks and commands of the same page,
which import or run it; it is checked through them, and one of them must use it.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from docs_helpers import doc_env
from support import forking
from docs_helpers import Block, blocks, page_id, pages

TIMEOUT = 60


def _python_blocks() -> list[tuple[Block, list[Block]]]:
    found = []
    for page in pages():
        files: list[Block] = []
        for b in blocks(page):
            if b.lang != "python":
                continue
            if not b.fragment and not b.file:
                found.append((b, list(files)))
            if b.file:
                files.append(b)
    return found


BLOCKS = _python_blocks()


@pytest.mark.parametrize(("block", "files"), BLOCKS, ids=[f"{page_id(b.page)}:{b.line}" for b, _ in BLOCKS])
def test_the_python_block_runs(block: Block, files: list[Block], workdir_factory: Callable[[str], Path]) -> None:
    workdir = workdir_factory("work")
    for f in files:
        (workdir / f.file).write_text(f.text, encoding="utf-8")  # type: ignore[operator]
    script = workdir / "doc_block.py"
    script.write_text(block.text, encoding="utf-8")
    done = forking.run([sys.executable, script.name], cwd=workdir, env=doc_env(), timeout=TIMEOUT,
                       stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"{page_id(block.page)}:{block.line}\n{done.stdout}\n{done.stderr}"


def test_every_saved_file_is_used_later_on_its_page() -> None:
    unused = []
    for page in pages():
        found = blocks(page)
        for n, b in enumerate(found):
            if b.file and not any(Path(b.file).stem in later.text for later in found[n + 1:]):
                unused.append(f"{page_id(page)}:{b.line}: {b.file}")
    assert not unused, f"saved but never run or imported: {unused}"


def test_fragments_are_few_and_marked() -> None:
    """Fragments are the exception: most blocks must be whole programs."""
    python = [b for p in pages() for b in blocks(p) if b.lang == "python"]
    fragments = [b for b in python if b.fragment]
    assert len(fragments) * 2 <= len(python), [f"{page_id(b.page)}:{b.line}" for b in fragments]
