"""The deployment page's compose file and systemd unit parse, and say what the page says they do.

No YAML library is needed: the compose file keeps to a subset (block mappings and lists, scalars,
JSON-style flow lists and mappings), read here by `_yaml`. The unit is read as systemd reads an
INI file: sections, `Key=Value`, `%` not interpolated.
"""

from __future__ import annotations

import configparser
import json
import shlex
from typing import Any

from docs_helpers import DOCS, blocks

PAGE = DOCS / "how-to" / "deploy-workers.md"


def _scalar(text: str) -> Any:
    text = text.strip()
    if text.startswith(("[", "{", '"')):
        return json.loads(text)
    if text.isdigit():
        return int(text)
    return text


def _yaml(text: str) -> Any:
    """A block-style YAML subset: `key: value`, `key:` + indented block, `- item`; `#` comments."""
    lines = [(len(l) - len(l.lstrip()), l.strip()) for l in text.splitlines()]
    lines = [(n, l) for n, l in lines if l and not l.startswith("#")]

    def block(i: int, indent: int) -> tuple[Any, int]:
        if lines[i][1].startswith("- "):
            items = []
            while i < len(lines) and lines[i][0] == indent and lines[i][1].startswith("- "):
                items.append(_scalar(lines[i][1][2:]))
                i += 1
            return items, i
        mapping: dict[str, Any] = {}
        while i < len(lines) and lines[i][0] == indent:
            key, sep, rest = lines[i][1].partition(":")
            assert sep, f"not a mapping line: {lines[i][1]!r}"
            i += 1
            if rest.strip():
                mapping[key] = _scalar(rest)
            else:
                assert i < len(lines) and lines[i][0] > indent, f"{key}: has no block"
                mapping[key], i = block(i, lines[i][0])
        return mapping, i

    doc, end = block(0, lines[0][0])
    assert end == len(lines), f"left unread from line {end}: {lines[end]}"
    return doc


def _one(lang: str) -> str:
    found = [b.text for b in blocks(PAGE) if b.lang == lang]
    assert len(found) == 1, f"expected one {lang} block on {PAGE.name}"
    return found[0]


def test_the_compose_file_runs_one_postgres_and_workers_stopped_by_sigterm_with_a_probe():
    doc = _yaml(_one("yaml"))
    assert set(doc["services"]) == {"postgres", "worker"}
    db, worker = doc["services"]["postgres"], doc["services"]["worker"]
    assert "idle_in_transaction_session_timeout=60s" in db["command"]
    command = worker["command"]
    assert command[:2] == ["polyloop", "worker"]
    for flag in ("--lease", "--grace", "--port", "--concurrency"):
        assert flag in command
    assert worker["stop_signal"] == "SIGTERM"
    assert int(worker["stop_grace_period"].rstrip("s")) > float(command[command.index("--grace") + 1])
    assert worker["depends_on"]["postgres"]["condition"] == "service_healthy"
    port = command[command.index("--port") + 1]
    assert f"127.0.0.1:{port}" in " ".join(worker["healthcheck"]["test"])
    assert worker["environment"]["POLYLOOP_STORE"].startswith("postgresql://")
    assert "pgdata" in doc["volumes"]


def test_the_systemd_unit_parses_and_stops_the_worker_with_sigterm_in_time():
    unit = configparser.ConfigParser(interpolation=None, strict=True)
    unit.optionxform = str  # systemd keys are case-sensitive
    unit.read_string(_one("ini"))
    assert unit.sections() == ["Unit", "Service", "Install"]
    service = unit["Service"]
    argv = shlex.split(service["ExecStart"])
    assert argv[0].startswith("/") and argv[1] == "worker"
    assert service["KillSignal"] == "SIGTERM"
    assert int(service["TimeoutStopSec"]) > float(argv[argv.index("--grace") + 1])
    health = argv[argv.index("--health") + 1]
    assert health.startswith(f"/run/{service['RuntimeDirectory']}/")
    assert "POLYLOOP_STORE=postgresql://" in service["Environment"]
    assert unit["Install"]["WantedBy"] == "multi-user.target"


def test_the_flags_the_page_shows_exist():
    page = (DOCS / "reference" / "cli.md").read_text(encoding="utf-8")
    worker = page[page.index("### `polyloop worker`"):]
    for flag in ("--health FILE", "--port N", "--grace SECONDS", "--lease SECONDS", "--concurrency N"):
        assert flag in worker, flag
