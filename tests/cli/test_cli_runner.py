"""In-process checks through typer's test runner: the exit-code map, unexpected errors, --debug."""

from __future__ import annotations

import asyncio

import pytest
from cli_helpers import target
from polyloop_cli import errors, inspect_cmd
from polyloop_cli.main import app
from typer.testing import CliRunner

import polyloop

runner = CliRunner()


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (polyloop.NeedsOperatorError("r", []), 3),
        (polyloop.CorruptLogError("r", [polyloop.Problem("x")]), 1),
        (polyloop.SchemaVersionError("r", "9.0"), 1),
        (polyloop.ModelCallError("r", 1, 1, "x"), 1),
        (polyloop.StoreError("x"), 1),
        (polyloop.InvalidRunIdError("../x"), 2),
        (polyloop.RunNotFoundError("r"), 2),
        (polyloop.RunExistsError("r"), 2),
        (polyloop.RunActiveError("r"), 2),
        (polyloop.RunMismatchError("r", "goal", "a", "b"), 2),
        (polyloop.ResolutionError("r", "s1-a1", "x"), 2),
        (polyloop.TargetError("t", "x"), 2),
        (errors.BadInput("x"), 2),
        (KeyboardInterrupt(), 130),
        (asyncio.CancelledError(), 130),
        (RuntimeError("a bug"), 1),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v),
)
def test_exit_code_map(exc, code):
    assert errors.exit_code(exc) == code


@pytest.mark.parametrize(("reason", "code"), [("final_answer", 0), ("max_steps", 0), ("error", 1)])
def test_result_codes(reason, code):
    assert errors.result_code(reason) == code


def test_inspect_json_through_the_runner(tmp_path):
    runs = str(tmp_path / "runs")
    result = runner.invoke(app, ["run", target("finishing"), "--goal", "g", "--run-id", "cr", "--dir", runs])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["inspect", "cr", "--dir", runs, "--json"])
    assert result.exit_code == 0
    import json

    assert json.loads(result.stdout)["status"] == "finished"


def test_an_unexpected_error_is_one_line_and_exit_1(tmp_path, monkeypatch):
    async def broken(store, run_id, **options):
        raise ValueError("something nobody expected")

    monkeypatch.setattr(inspect_cmd, "inspect_run", broken)
    result = runner.invoke(app, ["inspect", "x", "--dir", str(tmp_path)])
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "internal error: ValueError: something nobody expected" in lines[0]
    assert "--debug" in lines[0]

    result = runner.invoke(app, ["--debug", "inspect", "x", "--dir", str(tmp_path)])
    assert result.exit_code == 1
    assert "Traceback" in result.stderr and "something nobody expected" in result.stderr

    result = runner.invoke(app, ["inspect", "x", "--dir", str(tmp_path), "--json"])
    assert result.exit_code == 1
    assert '"type": "ValueError"' in result.stdout


def test_usage_errors_through_the_runner_are_one_line_too():
    result = runner.invoke(app, ["resume"])
    assert result.exit_code == 2
    assert len(result.stderr.splitlines()) == 1
