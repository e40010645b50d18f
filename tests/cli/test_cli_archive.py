"""`polyloop archive` from a run directory: what it chooses, what it refuses, and that the archive is a
run directory like any other (the kill points are in tests/crash/test_archive_kill_points.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import HERE, Cli, logs_digest, target

PIPELINE = f"{HERE / 'artifact_agents.py'}:pipeline"


@pytest.fixture
def three(cli: Cli) -> Cli:
    """Runs `done` (finished, two products), `fine` (finished) and `half` (died mid-run: resumable)."""
    assert cli("run", PIPELINE, "--run-id", "done", "--goal", "g").code == 0
    assert cli("run", target("finishing"), "--run-id", "fine", "--goal", "g").code == 0
    assert cli("run", PIPELINE, "--run-id", "half", "--goal", "g", env={"POLYLOOP_TEST_DIE_AT_CALL": "2"}).code == -9
    return cli


def test_finished_runs_move_whole_and_the_archive_is_a_run_directory(three: Cli, tmp_path: Path) -> None:
    cli, archive = three, tmp_path / "archive"
    done = cli("archive", "--finished", "--to", str(archive), "--dir", str(cli.runs), "--json")
    assert done.code == 0, done
    doc = done.json()
    assert doc["schema"] == 1 and doc["summary"] == {"archived": 2, "refused": 0}
    assert {r["run_id"]: r["finished"] for r in doc["runs"]} == {"done": True, "fine": True}
    assert sorted(p.name for p in cli.runs.iterdir()) == [".half.lock", "half.artifacts", "half.jsonl"]
    assert sorted(p.name for p in (archive / "done.artifacts").iterdir()) == ["extract.json", "summary.txt"]
    assert cli("verify", str(archive)).code == 0
    listed = cli("ls", "--dir", str(archive), "--json").json()
    assert sorted(r["run_id"] for r in listed) == ["done", "fine"]
    assert cli("inspect", "done", "--dir", str(archive), dir=False).code == 0


def test_a_named_unfinished_run_is_archived_and_resumes_from_the_archive(three: Cli, tmp_path: Path) -> None:
    cli, archive = three, tmp_path / "archive"
    done = cli("archive", "half", "--to", str(archive), "--dir", str(cli.runs))
    assert done.code == 0 and "archived half to" in done.stdout and "unfinished" in done.stdout, done
    resumed = cli("resume", "half", "--dir", str(archive), dir=False)
    assert resumed.code == 0, resumed
    assert cli("verify", str(archive)).code == 0


def test_older_than_keeps_the_recent_ones(three: Cli, tmp_path: Path) -> None:
    cli, archive = three, tmp_path / "archive"
    done = cli("archive", "--finished", "--older-than", "1h", "--to", str(archive), "--dir", str(cli.runs),
               "--json")
    assert done.code == 0 and done.json()["runs"] == [], done
    assert sorted(p.name for p in cli.runs.glob("*.jsonl")) == ["done.jsonl", "fine.jsonl", "half.jsonl"]


def test_a_corrupt_log_is_refused_and_stays(three: Cli, tmp_path: Path) -> None:
    cli, archive = three, tmp_path / "archive"
    log = cli.log("fine")
    log.write_text(log.read_text() + '{"record": "intent"}\n')
    before = logs_digest(cli.runs)
    done = cli("archive", "fine", "--to", str(archive), "--dir", str(cli.runs))
    assert done.code == 1 and "refused fine: its log is corrupt (line" in done.stderr, done
    assert logs_digest(cli.runs) == before and not (archive / "fine.jsonl").exists()


def test_a_run_already_in_the_archive_is_refused(three: Cli, tmp_path: Path) -> None:
    cli, archive = three, tmp_path / "archive"
    archive.mkdir()
    (archive / "fine.jsonl").write_text("")
    done = cli("archive", "fine", "--to", str(archive), "--dir", str(cli.runs), "--json")
    assert done.code == 1 and "already has a run fine" in done.json()["runs"][0]["reason"], done
    assert cli.log("fine").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "name the runs to archive, or archive the finished ones"),
        (["fine", "--finished"], "one of them"),
        (["fine", "--older-than", "1d"], "give --finished too"),
        (["--finished", "--older-than", "soon"], "is not a duration"),
        (["ghost"], "no run 'ghost'"),
        (["--finished", "--to-self"], ""),
    ],
)
def test_bad_usage_exits_2_and_moves_nothing(three: Cli, tmp_path: Path, args: list[str], message: str) -> None:
    cli = three
    before = logs_digest(cli.runs)
    to = str(cli.runs) if "--to-self" in args else str(tmp_path / "archive")
    args = [a for a in args if a != "--to-self"]
    done = cli("archive", *args, "--to", to, "--dir", str(cli.runs))
    assert done.code == 2 and (message or "the run directory itself") in done.stderr, done
    assert logs_digest(cli.runs) == before
