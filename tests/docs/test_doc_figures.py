"""The figures in docs/ are generated from sources kept beside them: the committed file is what
the source writes, and the pages that explain `inspect` show it."""

from __future__ import annotations

import importlib.util
import xml.etree.ElementTree as ET
from pathlib import Path

from docs_helpers import DOCS, ROOT

SOURCE = DOCS / "figures" / "four_states.py"


def _figure_module():
    spec = importlib.util.spec_from_file_location("four_states", SOURCE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_four_states_figure_is_what_its_source_draws() -> None:
    figure = _figure_module()
    committed = figure.FIGURE.read_text(encoding="utf-8")
    assert committed == figure.render(), f"run `python {SOURCE.relative_to(ROOT)}`"
    assert figure.main(["--check"]) == 0


def test_the_figure_draws_the_four_states_and_the_settling_commands() -> None:
    root = ET.fromstring(_figure_module().render())
    texts = [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]
    for state in ("not started", "unknown", "done", "impossible"):
        assert state in texts
    joined = " ".join(texts)
    assert "mark-resolved --executed" in joined and "mark-resolved --not-executed" in joined


def test_the_pages_that_explain_inspect_show_the_figure() -> None:
    for page in (ROOT / "README.md", DOCS / "tutorials" / "first-crash.md"):
        text = page.read_text(encoding="utf-8")
        link = "figures/four-states.svg"
        assert link in text, f"{page.relative_to(ROOT)} does not show {link}"
        assert text.index(link) > text.index("$ polyloop inspect"), "show it where inspect's output is explained"


def test_the_committed_resumed_trace_figure_is_what_its_source_draws_from_its_kept_trace() -> None:
    spec = importlib.util.spec_from_file_location("resumed_trace", DOCS / "figures" / "resumed_trace.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.FIGURE.read_text(encoding="utf-8") == module.render(), "run `python docs/figures/resumed_trace.py`"
    texts = " ".join(t.text or "" for t in ET.fromstring(module.render()).iter("{http://www.w3.org/2000/svg}text"))
    assert "polyloop.crashed" in texts and "polyloop.unknown" in texts and "polyloop.reused" in texts
    page = (DOCS / "how-to" / "see-runs-in-your-tracing-tool.md").read_text(encoding="utf-8")
    assert "../figures/resumed-trace.svg" in page
