"""`polyloop doctor` on a directory: one line per check, nothing left behind, exit 0 / 1 / 2."""

from __future__ import annotations

from polyloop._log.records import SCHEMA_VERSION

import json
import os
from pathlib import Path

import pytest
from cli_helpers import one_line_error, target


def _lines(stdout: str) -> dict[str, str]:
    """Each check's line by its name: `✓ name  detail`."""
    out = {}
    for line in stdout.splitlines():
        mark, name, detail = line.split(maxsplit=2)
        out[name] = f"{mark} {detail}"
    return out


def test_a_directory_with_runs_passes_and_is_left_as_it_was(cli):
    assert cli("run", target("finishing"), "--goal", "g", "--run-id", "one").code == 0
    before = sorted(os.listdir(cli.runs))
    done = cli("doctor", "--dir", str(cli.runs))
    assert done.code == 0, done
    lines = _lines(done.stdout)
    assert list(lines) == ["store", "write", "logs"]
    assert all(line.startswith("✓") for line in lines.values())
    assert "fsynced" in lines["write"] and "locked and removed" in lines["write"]
    assert f"1 log, format {SCHEMA_VERSION} (1)" in lines["logs"]
    assert sorted(os.listdir(cli.runs)) == before  # the probe is gone


def test_a_missing_directory_is_reported_not_created(cli, tmp_path):
    missing = tmp_path / "not" / "yet"
    done = cli("doctor", "--dir", str(missing))
    assert done.code == 0, done
    assert "does not exist yet" in _lines(done.stdout)["store"]
    assert not missing.exists() and not missing.parent.exists()
    assert os.listdir(tmp_path) == []


def test_a_file_where_the_directory_should_be_fails(cli, tmp_path):
    (tmp_path / "runs").write_text("x")
    done = cli("doctor", "--dir", str(tmp_path / "runs"))
    assert done.code == 1
    assert _lines(done.stdout)["store"].startswith("✗")


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc: a directory nobody can create files in")
def test_a_directory_that_cannot_be_written_fails_the_write_check(cli):
    done = cli("doctor", "--dir", "/proc/self")
    assert done.code == 1, done
    assert _lines(done.stdout)["write"].startswith("✗ cannot write")


def test_a_log_of_an_unknown_major_version_fails_the_logs_check(cli):
    assert cli("run", target("finishing"), "--goal", "g", "--run-id", "one").code == 0
    future = {"record": "run_started", "run_id": "future", "goal": "g", "schema_version": "2.0", "at": "x"}
    (cli.runs / "future.jsonl").write_text(json.dumps(future) + "\n")
    done = cli("doctor", "--dir", str(cli.runs))
    assert done.code == 1
    line = _lines(done.stdout)["logs"]
    assert line.startswith("✗") and f"{SCHEMA_VERSION} (1), 2.0 (1)" in line and "cannot read 2.0" in line


def test_a_target_is_imported_and_checked(cli):
    done = cli("doctor", target("finishing"), "--dir", str(cli.runs))
    assert done.code == 0, done
    assert "is an Agent: model ScriptedModel, tools read_note" in _lines(done.stdout)["target"]
    done = cli("doctor", "nowhere.py:agent", "--dir", str(cli.runs))
    assert done.code == 1
    assert _lines(done.stdout)["target"].startswith("✗ cannot load agent target")


def test_json_is_one_document(cli):
    done = cli("doctor", "nowhere.py:agent", "--json", "--dir", str(cli.runs))
    assert done.code == 1
    doc = json.loads(done.stdout)
    assert doc["schema"] == 1 and doc["ok"] is False
    assert [c["name"] for c in doc["checks"]] == ["store", "write", "logs", "target"]
    assert [c["ok"] for c in doc["checks"]] == [True, True, True, False]


def test_bad_usage_exits_2(cli):
    done = cli("doctor", "--store", "mysql://x/y")
    assert done.code == 2
    assert "unsupported store" in one_line_error(done)
    done = cli("doctor", "--dir", "a", "--store", "b")
    assert done.code == 2
