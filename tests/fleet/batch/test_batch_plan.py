"""Reading a goals file and the manifest: the rules docs/how-to/run-a-thousand-rollouts.md states."""

from __future__ import annotations

import json
import os

import pytest

from polyloop import BatchError
from polyloop._fleet.manifest import Manifest, batch_lock, load_manifest, manifest_path, reconcile, save_manifest
from polyloop._fleet.plan import check_name, default_name, read_goals


T = "agents.py:agent"


def plan(tmp_path, text: str, name: str = "b"):
    path = tmp_path / "goals"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return read_goals(path, name=name)


def test_plain_text_one_goal_per_line_blank_lines_skipped_but_counted(tmp_path):
    lines = plan(tmp_path, "  write a poem  \n\nsum 2+2\r\n")
    assert [(x.line, x.run_id, x.goal, x.error) for x in lines] == [
        (1, "b-00001", "write a poem", None),
        (3, "b-00003", "sum 2+2", None),
    ]


def test_a_file_is_jsonl_when_its_first_non_blank_line_starts_with_a_brace(tmp_path):
    lines = plan(tmp_path, '\n  {"goal": "g1"}\n{"goal": "g2", "run_id": "mine", "note": "kept aside"}\n')
    assert [(x.line, x.run_id, x.goal) for x in lines] == [(2, "b-00002", "g1"), (3, "mine", "g2")]
    # The same text after a plain line is a goal like any other.
    text = plan(tmp_path, 'plain\n{"goal": "g1"}\n')
    assert [x.goal for x in text] == ["plain", '{"goal": "g1"}']


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("not json", "the line is not JSON"),
        ("[1, 2]", "the line is an array, not a JSON object"),
        ('{"run_id": "x"}', 'the line has no "goal" (a string is required)'),
        ('{"goal": 3}', 'the line has a number as its "goal"'),
        ('{"goal": "g", "run_id": "../etc/passwd"}', "invalid run id '../etc/passwd'"),
        ('{"goal": "g", "run_id": ".hidden"}', "invalid run id '.hidden'"),
        ('{"goal": "g", "inputs": {"file": 3}}', '"inputs" must be an object of input names'),
        (b"\xff\xfe goal", "the line is not UTF-8 text"),
    ],
    ids=["not-json", "array", "no-goal", "number-goal", "traversal-id", "dot-id", "inputs", "not-utf8"],
)
def test_a_bad_line_gets_its_own_error_and_the_others_still_plan(tmp_path, line, error):
    data = b'{"goal": "first"}\n' + (line if isinstance(line, bytes) else line.encode()) + b'\n{"goal": "last"}\n'
    lines = plan(tmp_path, data)
    assert [x.line for x in lines] == [1, 2, 3]
    assert lines[0].error is None and lines[2].error is None
    assert lines[1].error is not None and error in lines[1].error


def test_a_byte_order_mark_is_not_part_of_the_first_goal(tmp_path):
    assert [x.goal for x in plan(tmp_path, '\ufeff{"goal": "g"}\n')] == ["g"]
    assert [x.goal for x in plan(tmp_path, "\ufeffplain goal\n")] == ["plain goal"]


def test_a_run_id_used_twice_is_an_error_on_the_later_line(tmp_path):
    lines = plan(tmp_path, '{"goal": "a", "run_id": "b-00002"}\n{"goal": "b"}\n')
    assert lines[0].error is None
    assert lines[1].error == 'run id \'b-00002\' is already used by line 1: give this line another "run_id"'


def test_lines_can_be_given_directly(tmp_path):
    lines = read_goals(["one", "two"], name="x")
    assert [(x.run_id, x.goal) for x in lines] == [("x-00001", "one"), ("x-00002", "two")]
    lines = read_goals([{"goal": "g", "run_id": "r"}], name="x")
    assert [(x.run_id, x.goal) for x in lines] == [("r", "g")]
    lines = read_goals(["a", {"goal": "b", "run_id": "bee"}, "  ", '{"goal": "c"}', 5, [1]], name="x")
    assert [(x.line, x.run_id, x.goal, x.error) for x in lines] == [
        (1, "x-00001", "a", None),
        (2, "bee", "b", None),
        (4, "x-00004", '{"goal": "c"}', None),  # a string item is a goal, whatever it looks like
        (5, "x-00005", None, "the line is an int: give a goal string or a mapping"),
        (6, "x-00006", None, "the line is a list: give a goal string or a mapping"),
    ]


@pytest.mark.parametrize(
    ("file", "name"),
    [("evals.jsonl", "evals"), ("my goals (v2).txt", "my-goals-v2-"), (".hidden.txt", "hidden"), ("···.txt", "batch")],
)
def test_the_default_name_is_the_stem_made_safe(file, name):
    assert default_name(file) == name.rstrip("-")


def test_an_unsafe_name_is_refused():
    with pytest.raises(BatchError, match="invalid batch name"):
        check_name("../x")
    with pytest.raises(BatchError, match="limit is 150"):
        check_name("n" * 151)


def test_a_missing_goals_file_is_a_batch_error(tmp_path):
    with pytest.raises(BatchError, match="no goals file"):
        read_goals(tmp_path / "nope.txt", name="b")
    with pytest.raises(BatchError, match="is a directory"):
        read_goals(tmp_path, name="b")


def test_the_manifest_reports_changed_and_removed_lines_and_never_rewrites_an_entry(tmp_path):
    first = read_goals(["a", "b", "c"], name="n")
    lines, removed, runs = reconcile(first, Manifest(), target=T)
    assert removed == [] and sorted(runs) == ["n-00001", "n-00002", "n-00003"]
    path = manifest_path(tmp_path, "n")
    save_manifest(path, name="n", target=T, runs=runs)
    assert json.loads(path.read_text())["runs"] == runs

    second = read_goals(["a", "B!", "c", "d"], name="n")
    lines, removed, updated = reconcile(second, load_manifest(path), target=T)
    assert [x.error is None for x in lines] == [True, False, True, False]
    assert lines[1].changed and "the goals file changed" in lines[1].error
    # A new line waits while the file differs from what the batch first ran.
    assert lines[3].changed and "changed since the batch first ran (line 2 changed)" in lines[3].error
    assert updated == runs  # the first plan stays the reference; nothing recorded for what waits
    lines, _, updated = reconcile(read_goals(["a", "b", "c", "d"], name="n"), load_manifest(path), target=T)
    assert [x.error for x in lines] == [None] * 4 and "n-00004" in updated  # a pure append starts

    third = read_goals(["a", "b"], name="n")
    lines, removed, _ = reconcile(third, load_manifest(path), target=T)
    assert [x.error for x in lines] == [None, None]
    assert [(x.run_id, x.line) for x in removed] == [("n-00003", 3)]
    assert "is gone" in removed[0].error


def test_a_damaged_manifest_is_refused_not_overwritten(tmp_path):
    path = manifest_path(tmp_path, "n")
    path.write_text("{not json")
    with pytest.raises(BatchError, match="cannot be read"):
        load_manifest(path)
    path.write_text('{"version": 99, "runs": {}}')
    with pytest.raises(BatchError, match="not a version 1 manifest"):
        load_manifest(path)


def test_the_manifest_write_leaves_no_temp_file(tmp_path):
    path = manifest_path(tmp_path, "n")
    save_manifest(path, name="n", target="t", runs={})
    assert sorted(os.listdir(tmp_path)) == [".batch-n.json"]


def test_one_invocation_of_a_batch_at_a_time(tmp_path):
    with batch_lock(tmp_path, "n"):
        with pytest.raises(BatchError, match=r"batch n is already running .*pid \d+"):
            with batch_lock(tmp_path, "n"):
                pass
    with batch_lock(tmp_path, "n"):  # released on exit
        pass


def test_a_line_that_moved_names_the_run_it_was_and_nothing_new_starts():
    _, _, runs = reconcile(read_goals(["a", "", "b", "c"], name="n"), Manifest(), target=T)
    again = read_goals(["a", "b", "c", "", "new"], name="n")
    lines, removed, updated = reconcile(again, Manifest(T, runs), target=T)
    assert updated == runs
    assert [x.error is None for x in lines] == [True, False, False, False]
    assert all(x.changed for x in lines[1:])
    assert "asks what run n-00003 (then on line 3) asked, so it moved" in lines[1].error
    assert "run n-00003 was planned for another goal (then on line 3); this line now asks what run " \
        "n-00004 (then on line 4) asked" in lines[2].error
    assert "changed since the batch first ran (line 3 changed and line 4 gone)" in lines[3].error
    assert [x.run_id for x in removed] == ["n-00004"]
    assert "line 4 (run n-00004) is gone (what it asked is now on line 3)" in removed[0].error


def test_the_same_goal_on_several_lines_is_several_rollouts():
    _, _, runs = reconcile(read_goals(["x", "x"], name="n"), Manifest(), target=T)
    lines, _, updated = reconcile(read_goals(["x", "x", "x"], name="n"), Manifest(T, runs), target=T)
    assert [x.error for x in lines] == [None, None, None] and "n-00003" in updated


def test_a_recorded_line_that_turned_bad_keeps_its_own_error_and_holds_new_lines_back():
    _, _, runs = reconcile(read_goals([{"goal": "a"}, {"goal": "b"}], name="n"), Manifest(), target=T)
    again = read_goals([{"goal": "a"}, {"run_id": "n-00002"}, {"goal": "c"}], name="n")
    lines, removed, _ = reconcile(again, Manifest(T, runs), target=T)
    assert lines[1].error.startswith('the line has no "goal"') and not lines[1].changed
    assert lines[2].changed and "(line 2 changed)" in lines[2].error
    assert removed == []


def test_another_target_plans_nothing_and_keeps_the_manifest():
    _, _, runs = reconcile(read_goals(["a", "b"], name="n"), Manifest(), target=T)
    again = read_goals([{"goal": "a"}, {"run_id": "x"}, {"goal": "c"}], name="n")
    lines, removed, updated = reconcile(again, Manifest(T, runs), target="other.py:agent")
    assert updated == runs
    assert [(x.line, x.changed) for x in lines] == [(1, True), (2, False), (3, True)]  # a bad line stays bad
    assert [(x.line, x.run_id, x.changed) for x in removed] == [(2, "n-00002", True)]
    for x in [lines[0], lines[2], removed[0]]:
        assert x.error == (
            f"the batch first ran with the agent target {T}, not other.py:agent; nothing starts with "
            "another agent: run the batch with that target, or give the batch a new --name"
        )


def test_the_manifest_keeps_its_target(tmp_path):
    path = manifest_path(tmp_path, "n")
    assert load_manifest(path) == Manifest()
    save_manifest(path, name="n", target=T, runs={"n-00001": {"line": 1, "digest": "d"}})
    assert load_manifest(path) == Manifest(T, {"n-00001": {"line": 1, "digest": "d"}})


def test_a_json_error_names_the_column_of_the_file_line(tmp_path):
    lines = plan(tmp_path, '{"goal": "first"}\n{"goal": oops}\n')
    error = lines[1].error
    assert error.startswith("the line is not JSON (") and "column 10 of line 2" in error, error
    assert "line 1" not in error and "(char" not in error
    bom = plan(tmp_path, '\ufeff{goal}\n')[0].error
    assert "column 2 of line 1" in bom, bom  # as an editor counts: the BOM it does not show is not


def test_an_entry_of_an_older_manifest_still_compares_and_says_less():
    old = {"n-00001": {"line": 1, "digest": read_goals(["a"], name="n")[0].digest}}
    lines, _, updated = reconcile(read_goals(["a", "b"], name="n"), Manifest(T, old), target=T)
    assert [x.error for x in lines] == [None, None]
    assert updated["n-00001"] == old["n-00001"]  # never rewritten, not even to add the new fields
    assert set(updated["n-00002"]) == {"line", "digest", "goal_digest", "inputs_digest"}
    lines, _, _ = reconcile(read_goals(["A"], name="n"), Manifest(T, old), target=T)
    assert "run n-00001 was planned for another goal or other inputs (then on line 1)" in lines[0].error
