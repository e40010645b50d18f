"""A goals file or target changed between two invocations: reported per line, never a goal run twice, never mixed."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from batch_helpers import World, target

from polyloop import BatchError, run_batch


@pytest.fixture
def world(tmp_path) -> World:
    return World(tmp_path)


def _stamps(world: World) -> Counter[str]:
    return Counter(e["run_id"] for e in world.effects())


def test_reordered_jsonl_lines_start_no_goal_a_second_time(world):
    path = world.root / "g.jsonl"
    path.write_text('{"goal": "x", "run_id": "foo"}\n{"goal": "y"}\n')
    assert world.batch("stamper", path).code == 0
    before = _stamps(world)
    assert before == {"foo": 2, "g-00002": 2}

    path.write_text('{"goal": "y"}\n{"goal": "z"}\n{"goal": "x", "run_id": "foo"}\n')
    done = world.batch("stamper", path, "--json")
    assert done.code == 1, done
    by_line = {r["line"]: r for r in done.json()["runs"]}
    moved = by_line[1]
    assert (moved["run_id"], moved["status"], moved["action"]) == ("g-00001", "changed", "none")
    assert "run g-00002 (then on line 2)" in moved["reason"], moved
    assert by_line[2]["status"] == "changed" and "run g-00002 was planned for another goal" in by_line[2]["reason"]
    assert (by_line[3]["status"], by_line[3]["action"]) == ("finished", "skipped")
    assert _stamps(world) == before  # `y` did not run again, as g-00001 or otherwise
    assert not (world.runs / "g-00001.jsonl").exists()
    manifest = json.loads((world.runs / ".batch-g.json").read_text())
    assert sorted(manifest["runs"]) == ["foo", "g-00002"]  # nothing recorded for what did not start


def test_a_removed_blank_line_shifts_no_goal_into_a_new_run(world):
    goals = world.goals(["a", "", "b", "c"])
    assert world.batch("stamper", goals).code == 0
    before = _stamps(world)
    world.goals(["a", "b", "c"])
    done = world.batch("stamper", goals, "--json")
    assert done.code == 1, done
    runs = done.json()["runs"]
    assert [(r["run_id"], r["status"]) for r in runs] == [
        ("goals-00001", "finished"),
        ("goals-00002", "changed"),
        ("goals-00003", "changed"),
        ("goals-00004", "changed"),
    ]
    assert "run goals-00003 (then on line 3)" in runs[1]["reason"]
    assert "is gone" in runs[3]["reason"]
    assert _stamps(world) == before
    assert not (world.runs / "goals-00002.jsonl").exists()


def test_new_lines_wait_while_the_file_differs_from_what_the_batch_first_ran(world):
    goals = world.goals(["alpha", "beta", "gamma"])
    assert world.batch("quick", goals).code == 0
    world.goals(["alpha", "BETA", "gamma", "delta"])
    doc = world.batch("quick", goals, "--json").json()
    new = doc["runs"][3]
    assert (new["run_id"], new["status"], new["action"]) == ("goals-00004", "changed", "none")
    assert "the goals file changed since the batch first ran" in new["reason"]
    assert "line 2" in new["reason"] and "restore it, or give the batch a new --name" in new["reason"]
    assert not (world.runs / "goals-00004.jsonl").exists()
    world.goals(["alpha", "beta", "gamma", "delta"])  # restored, plus the new line: a pure append
    again = world.batch("quick", goals, "--json").json()
    assert [r["status"] for r in again["runs"]] == ["finished"] * 4
    assert again["runs"][3]["action"] == "started"


def test_the_same_goal_appended_again_is_a_new_rollout(world):
    goals = world.goals(["same", "same"])
    assert world.batch("quick", goals).code == 0
    world.goals(["same", "same", "same"])
    doc = world.batch("quick", goals, "--json").json()
    assert [r["action"] for r in doc["runs"]] == ["skipped", "skipped", "started"]


def test_another_target_starts_nothing_and_the_recorded_one_stays(world):
    goals = world.goals(["a", "b"])
    assert world.batch("quick", goals).code == 0
    manifest = world.runs / ".batch-goals.json"
    recorded = json.loads(manifest.read_text())
    world.goals(["a", "b", "c"])
    done = world.batch("stamper", goals, "--json")
    assert done.code == 1, done
    runs = done.json()["runs"]
    assert [(r["status"], r["action"]) for r in runs] == [("changed", "none")] * 3
    for r in runs:
        assert target("quick") in r["reason"] and target("stamper") in r["reason"], r
        assert "--name" in r["reason"]
    assert not (world.runs / "goals-00003.jsonl").exists() and world.effects() == []
    assert json.loads(manifest.read_text()) == recorded
    assert world.batch("quick", goals).code == 0  # the recorded target carries on, with the new line


def test_strings_and_mappings_mix_and_other_items_are_a_clear_line_error(world):
    report = run_batch(target("quick"), ["a", {"goal": "b", "run_id": "bee"}, "c"], name="mix",
                       directory=world.runs, processes=1)
    assert [(r.run_id, r.status) for r in report.runs] == [
        ("mix-00001", "finished"), ("bee", "finished"), ("mix-00003", "finished")
    ]
    report = run_batch(target("quick"), ["a", 5, None, b"x"], name="odd", directory=world.runs, processes=1)
    assert [r.status for r in report.runs] == ["finished", "invalid", "invalid", "invalid"]
    assert report.runs[1].reason == "the line is an int: give a goal string or a mapping"
    assert report.runs[2].reason == "the line is None: give a goal string or a mapping"
    assert report.runs[3].reason == "the line is bytes: give a goal string or a mapping"


def test_a_string_given_as_an_item_is_a_goal_even_when_it_looks_like_json(world):
    report = run_batch(target("quick"), ['{"not": "a line object"}', {"goal": "g"}], name="j",
                       directory=world.runs, processes=1)
    assert [r.status for r in report.runs] == ["finished", "finished"]
    first = json.loads((world.runs / "j-00001.jsonl").read_text().splitlines()[0])
    assert first["goal"] == '{"not": "a line object"}'


def test_an_open_goals_file_reads_like_its_path(world):
    path = world.root / "f.jsonl"
    path.write_text('{"goal": "g", "run_id": "from-file"}\n')
    with path.open() as f:
        report = run_batch(target("quick"), f, name="f", directory=world.runs, processes=1)
    assert [(r.run_id, r.status) for r in report.runs] == [("from-file", "finished")]


def test_changed_inputs_say_it_was_the_inputs(world):
    one, two = world.root / "one.txt", world.root / "two.txt"
    one.write_text("1")
    two.write_text("2")
    items = [{"goal": "read", "inputs": {"doc": str(one)}}, {"goal": "other", "inputs": {"doc": str(one)}}]
    assert run_batch(target("quick"), items, name="in", directory=world.runs, processes=1).outcome == "finished"
    items = [{"goal": "read", "inputs": {"doc": str(two)}}, {"goal": "another", "inputs": {"doc": str(two)}}]
    report = run_batch(target("quick"), items, name="in", directory=world.runs, processes=1)
    assert [r.status for r in report.runs] == ["changed", "changed"]
    assert "run in-00001 was planned with other inputs" in report.runs[0].reason
    assert "the goal is the same" in report.runs[0].reason
    assert "run in-00002 was planned for another goal with other inputs" in report.runs[1].reason


def test_a_file_of_blank_lines_leaves_nothing_behind(world):
    goals = world.goals(["", "  "])
    with pytest.raises(BatchError, match="has no goals"):
        run_batch(target("quick"), goals, directory=world.runs, processes=1)
    assert not world.runs.exists()
    world.runs.mkdir()
    with pytest.raises(BatchError, match="has no goals"):
        run_batch(target("quick"), goals, directory=world.runs, processes=1)
    assert list(world.runs.iterdir()) == []
