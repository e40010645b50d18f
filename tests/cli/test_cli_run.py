"""`polyloop run` through the real console script."""

from __future__ import annotations

import json

import re

from cli_helpers import AGENTS, HERE, one_line_error, target, tree_digest

GENERATED = re.compile(r"run-\d{8}T\d{6}Z-[0-9a-f]{6}")


def test_a_finished_run_prints_its_id_and_answer_and_exits_0(cli):
    done = cli("run", target("finishing"), "--goal", "what to buy?", "--run-id", "shop-1")
    assert done.code == 0, done
    assert done.stdout.splitlines()[0].startswith("run shop-1")
    assert "You need milk." in done.stdout
    assert done.stderr == ""
    kinds = [r["record"] for r in cli.records("shop-1")]
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished"


def test_the_target_and_its_arguments_are_recorded_for_resume(cli):
    cli("run", target("finishing"), "--goal", "g", "--run-id", "rec", "--max-steps", "7")
    started = cli.records("rec")[0]
    assert started["target"] == f"{AGENTS}:finishing"  # absolute, so resume works from anywhere
    assert started["goal"] == "g"
    assert started["config"]["max_steps"] == 7


def test_without_run_id_a_sortable_id_is_generated_and_printed(cli):
    done = cli("run", target("finishing"), "--goal", "g")
    assert done.code == 0, done
    found = GENERATED.findall(done.stdout)
    assert found, done.stdout
    assert cli.log(found[0]).exists()


def test_a_module_target_and_a_factory_target_work(cli):
    env = {"PYTHONPATH": str(HERE)}
    assert cli("run", "agents:finishing", "--goal", "g", "--run-id", "mod", env=env).code == 0
    assert cli.records("mod")[0]["target"] == "agents:finishing"
    done = cli("run", target("make_mailer"), "--goal", "g", "--run-id", "fac")
    assert done.code == 0, done
    assert "Email sent." in done.stdout


def test_an_existing_run_id_is_refused_with_a_hint_to_resume_and_left_alone(cli):
    cli("run", target("finishing"), "--goal", "g", "--run-id", "twice")
    before = tree_digest(cli.runs)
    done = cli("run", target("finishing"), "--goal", "g", "--run-id", "twice")
    assert done.code == 2
    assert "polyloop resume twice" in one_line_error(done)
    assert tree_digest(cli.runs) == before


def test_an_unsafe_run_id_is_refused_and_nothing_is_written(cli, tmp_path):
    for bad in ("../escape", ".hidden", "a/b", "sp ace", "x" * 201):
        done = cli("run", target("finishing"), "--goal", "g", "--run-id", bad)
        assert done.code == 2, (bad, done)
        assert "invalid run id" in one_line_error(done)
    assert not cli.runs.exists()
    assert not (tmp_path / "escape.jsonl").exists()


def test_the_goal_is_optional_and_recorded_empty(cli):
    done = cli("run", target("finishing"), "--run-id", "nogoal")
    assert done.code == 0
    first = json.loads(cli.log("nogoal").read_text().splitlines()[0])
    assert first["record"] == "run_started" and first["goal"] == ""


def test_bad_targets_are_bad_input_and_create_no_log(cli, tmp_path):
    for bad in (
        "no-such-file.py:agent",
        "no_such_module_xyz:agent",
        target("no_such_name"),
        target("not_an_agent"),
        target("raising_factory"),
        "missing-colon",
    ):
        done = cli("run", bad, "--goal", "g", "--run-id", "t")
        assert done.code == 2, (bad, done)
        assert "cannot load agent target" in one_line_error(done)
        assert done.stdout == ""  # no run id was announced
    assert not cli.log("t").exists()


def test_a_run_that_ends_in_an_error_exits_1(cli):
    done = cli("run", target("model_error"), "--goal", "g", "--run-id", "err")
    assert done.code == 1, done
    assert "error" in one_line_error(done)
    assert cli.records("err")[-1]["reason"] == "error"


def test_a_failed_model_call_exits_1_and_leaves_the_run_resumable(cli):
    done = cli("run", target("model_down"), "--goal", "g", "--run-id", "down")
    assert done.code == 1, done
    assert "model server unreachable" in one_line_error(done)
    assert cli.records("down")[-1]["record"] != "run_finished"
    assert cli("inspect", "down", "--json").json()["status"] == "resumable"


def test_a_spent_step_budget_finishes_with_0(cli):
    done = cli("run", target("looping"), "--goal", "g", "--run-id", "loop")
    assert done.code == 0, done
    assert "step budget" in done.stdout
    assert cli.records("loop")[-1]["reason"] == "max_steps"


def test_a_failing_tool_is_an_observation_not_a_failure(cli):
    done = cli("run", target("failing_tool"), "--goal", "g", "--run-id", "tool")
    assert done.code == 0, done
    assert "giving up" in done.stdout


def test_max_steps_must_be_positive(cli):
    done = cli("run", target("finishing"), "--goal", "g", "--max-steps", "0")
    assert done.code == 2
    assert "--max-steps" in one_line_error(done)


def test_dir_defaults_to_POLYLOOP_DIR_then_to_runs(cli, tmp_path):
    assert cli("run", target("finishing"), "--goal", "g", "--run-id", "d1", dir=False).code == 0
    assert (tmp_path / "runs" / "d1.jsonl").exists()
    env = {"POLYLOOP_DIR": str(tmp_path / "elsewhere")}
    assert cli("run", target("finishing"), "--goal", "g", "--run-id", "d2", dir=False, env=env).code == 0
    assert (tmp_path / "elsewhere" / "d2.jsonl").exists()
    assert cli("inspect", "d2", dir=False, env=env).code == 0
    assert cli("inspect", "d2", dir=False).code == 2
