"""The CLI reference cannot drift from the code; every command and exit code is documented."""

from __future__ import annotations

import json
import re
from pathlib import Path

import sys

from polyloop_cli import errors

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))  # the generator lives outside the installed package
import gen_cli_docs as gen_docs  # noqa: E402

DOCS = ROOT / "docs" / "reference"


def test_the_generated_reference_matches_the_help_texts():
    page = (DOCS / "cli.md").read_text(encoding="utf-8")
    assert gen_docs.generated() in page, "run `python tools/gen_cli_docs.py`"
    assert gen_docs.main(["--check"]) == 0


def test_every_command_is_documented_with_an_example():
    page = (DOCS / "cli.md").read_text(encoding="utf-8")
    names = gen_docs.command_names()
    assert names == ["run", "demo", "inspect", "ls", "mark-resolved", "approve", "deny", "answer", "resume", "watch", "serve", "trace",
                     "cancel", "verify", "doctor", "archive", "export", "import", "batch", "submit", "worker"]
    for name in names:
        assert f"### `polyloop {name}`" in page
        text = gen_docs.help_text(name)
        assert "Example:" in text and f"polyloop {name} " in text[text.index("Example:"):]


def test_the_reference_shows_real_output_of_inspect_and_verify():
    page = (DOCS / "cli.md").read_text(encoding="utf-8")
    hand_written = page[: page.index(gen_docs.BEGIN)]
    for command in ("polyloop inspect demo", "polyloop verify runs/", "polyloop mark-resolved demo s2-a1"):
        assert f"$ {command}" in hand_written
    assert re.search(r"s2-a1\s+unknown\s+never", hand_written)


def test_every_exit_code_and_mapped_error_is_documented():
    page = (DOCS / "exit-codes.md").read_text(encoding="utf-8")
    for code in (0, 1, 2, 3, 130):
        assert f"| `{code}` |" in page
    for kind, _code in errors._CODES:
        if kind.__module__.startswith(("polyloop", "builtins", "asyncio")) and kind.__name__ != "BadInput":
            assert kind.__name__ in page, kind.__name__


def test_the_json_examples_are_real_documents_of_the_documented_shape():
    page = (DOCS / "json.md").read_text(encoding="utf-8")
    blocks = [json.loads(b) for b in re.findall(r"```json\n(.*?)\n```", page, re.S)]
    inspect_doc = next(b for b in blocks if "executions" in b)
    verify_doc = next(b for b in blocks if "files" in b)
    error_doc = next(b for b in blocks if "error" in b)
    for key in ("run_id", "status", "reason", "executions", "problems"):
        assert key in inspect_doc
    for e in inspect_doc["executions"]:
        assert {"id", "kind", "step", "attempt", "state"} <= set(e)
        if e["kind"] == "action":
            assert {"tool", "args", "replay"} <= set(e)
    assert set(verify_doc) == {"schema", "files", "summary"}
    for b in blocks:  # every document carries its schema version (json.md)
        assert all(d["schema"] == 1 for d in (b if isinstance(b, list) else [b])), b
    assert set(verify_doc["summary"]) == {"ok", "torn_tail", "corrupt", "bad_product"}
    assert set(error_doc["error"]) == {"type", "message", "exit_code"}
