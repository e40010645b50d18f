"""The public surface stays curated, honest and free of the CLI's dependencies."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import polyloop

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_all_is_sorted_and_lists_exactly_the_public_names():
    assert polyloop.__all__ == sorted(polyloop.__all__)
    public = {n for n in dir(polyloop) if not n.startswith("_")} - {"stores", "testing", "openai", "anthropic", "mcp", "examples", "for_cli", "otel", "durable", "pydantic_ai"}
    assert public == set(polyloop.__all__)


def test_the_otel_extra_names_are_pinned():
    import polyloop.otel

    assert polyloop.otel.__all__ == [
        "Span", "Trace", "TracedStore", "WorkerMetrics", "enabled_by_env", "export", "instrument", "instrumenter",
        "observe_from_env", "providers_from_env", "readable_spans", "rebuild",
    ]
    assert all(hasattr(polyloop.otel, n) for n in polyloop.otel.__all__)


def test_reexported_names_report_their_public_module():
    for name in ("Agent", "JsonlStore", "tool", "CorruptLogError", "ScriptedModel"):
        assert getattr(polyloop, name).__module__ in ("polyloop", "polyloop.stores")


def test_issue_names_are_importable():
    from polyloop import (  # noqa: F401
        Agent,
        CorruptLogError,
        InvalidRunIdError,
        JsonlStore,
        NeedsOperatorError,
        RunActiveError,
        ScriptedModel,
        Store,
        StoreError,
        ToolContext,
        tool,
    )


def test_the_library_never_imports_typer_rich_or_openai():
    code = ("import sys, polyloop, polyloop.testing, polyloop.stores, polyloop.durable; "
            "print(sorted(m for m in ('typer','rich','openai','pytest','pydantic_ai') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_public_item_has_a_docstring():
    for name in polyloop.__all__:
        obj = getattr(polyloop, name)
        if callable(obj) and name != "Record":  # Record is a typing.Union alias
            assert obj.__doc__ and obj.__doc__.strip(), name


def test_nothing_claims_exactly_once():
    offenders = []
    for folder, dirs, files in os.walk(ROOT):
        # Hidden folders (.git, .venv, caches) are not the project's words: never walked.
        dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
        for name in files:
            path = pathlib.Path(folder, name)
            if name.startswith(".") or path.suffix not in {".py", ".md", ".toml", ".txt", ".sh", ""}:
                continue
            if path.stat().st_size > 2_000_000:
                continue
            text = path.read_text(errors="ignore").lower()
            phrase = "exactly" + " once"
            for line in text.splitlines():
                if phrase in line and "never" not in line and "not" not in line and "no " not in line:
                    offenders.append(f"{path.relative_to(ROOT)}: {line.strip()}")
    assert offenders == []
