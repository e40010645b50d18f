"""The power-loss model on hand-written traces: each rule of powerloss/model.py, state by state."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from powerloss.explore import Tally, explore, point_states
from powerloss.model import FileFuture, frontiers
from powerloss.trace import Op, Trace

LINE1 = b'{"n":1}\n'
LINE2 = b'{"n":2}\n'
LINE3 = b'{"n":3}\n'


def _created(path: str = "log", ino: int = 1, data: bytes = LINE1) -> list[Op]:
    """A file created, written, fsync'd and its name made durable."""
    return [
        Op("create", path, ino),
        Op("write", ino=ino, offset=0, data=data),
        Op("fsync", ino=ino),
        Op("fsync_dir", "."),
    ]


def _last_states(trace: Trace, per_point: int = 10**6) -> set[tuple[tuple[str, bytes], ...]]:
    """Every state a power cut after the trace's last op may leave, as sorted (path, bytes)."""
    *_, last = frontiers(trace)
    states, whole = point_states(last, per_point=per_point, rng=random.Random(0))
    assert whole
    return {tuple(sorted(state.files.items())) for state in states}


def test_synced_data_always_survives_and_later_appends_survive_as_any_byte_prefix():
    ops = [*_created(), Op("write", ino=1, offset=8, data=LINE2), Op("write", ino=1, offset=16, data=LINE3)]
    states = _last_states(Trace(ops))
    contents = {dict(s)["log"] for s in states}
    tail = LINE2 + LINE3
    for cut in range(len(tail) + 1):
        assert LINE1 + tail[:cut] in contents  # every byte, not only line ends
        for nul in range(cut):
            assert LINE1 + tail[:nul] + bytes(cut - nul) in contents
    assert all(c.startswith(LINE1) for c in contents)
    # no more than that: prefixes, each with any NUL suffix
    assert len(contents) == sum(cut + 1 for cut in range(len(tail) + 1))


def test_fsync_makes_the_appends_before_it_durable():
    ops = [*_created(), Op("write", ino=1, offset=8, data=LINE2), Op("fsync", ino=1)]
    assert _last_states(Trace(ops)) == {(("log", LINE1 + LINE2),)}


def test_a_name_survives_only_after_its_directory_is_synced():
    ops = [Op("create", "log", 1), Op("write", ino=1, offset=0, data=LINE1), Op("fsync", ino=1)]
    assert _last_states(Trace(ops)) == {(), (("log", LINE1),)}
    assert _last_states(Trace([*ops, Op("fsync_dir", ".")])) == {(("log", LINE1),)}


def test_names_in_a_new_directory_need_the_directory_itself_to_survive():
    ops = [
        Op("mkdir", "runs"),
        Op("create", "runs/log", 1),
        Op("write", ino=1, offset=0, data=LINE1),
        Op("fsync", ino=1),
        Op("fsync_dir", "runs"),
    ]
    assert _last_states(Trace(ops)) == {(), (("runs/log", LINE1),)}
    assert _last_states(Trace([*ops, Op("fsync_dir", ".")])) == {(("runs/log", LINE1),)}


def test_a_rename_is_atomic_never_both_names_nor_neither():
    ops = [*_created("tmp"), Op("rename", "tmp", 1, dst="log")]
    assert _last_states(Trace(ops)) == {(("tmp", LINE1),), (("log", LINE1),)}


def test_a_link_and_an_unlink_survive_independently_until_the_directory_sync():
    ops = [*_created("tmp"), Op("link", "log", 1), Op("unlink", "tmp", 1)]
    assert _last_states(Trace(ops)) == {
        (("tmp", LINE1),),
        (("log", LINE1), ("tmp", LINE1)),
        (("log", LINE1),),
        (),
    }


def test_appends_to_two_files_are_not_ordered_with_each_other():
    ops = [
        *_created("a", 1),
        *_created("b", 2),
        Op("write", ino=1, offset=8, data=LINE2),
        Op("write", ino=2, offset=8, data=LINE2),
    ]
    contents = {(dict(s)["a"], dict(s)["b"]) for s in _last_states(Trace(ops))}
    assert (LINE1, LINE1 + LINE2) in contents  # the later append survived, the earlier not
    assert (LINE1 + LINE2, LINE1) in contents


def test_a_truncate_then_append_survives_in_order():
    ops = [
        *_created(data=LINE1 + b'{"torn'),
        Op("truncate", ino=1, size=8),
        Op("write", ino=1, offset=8, data=LINE2),
    ]
    contents = {dict(s)["log"] for s in _last_states(Trace(ops))}
    assert LINE1 + b'{"torn' in contents  # neither survived
    assert LINE1 + LINE2 in contents
    assert LINE1 + b'{"n' in contents  # the truncate survived, the append cut
    assert all(c.startswith(LINE1) for c in contents)


def test_files_that_existed_before_the_trace_are_durable():
    trace = Trace([Op("write", ino=-1, offset=8, data=LINE2)], files={"log": LINE1})
    contents = {dict(s)["log"] for s in _last_states(trace)}
    assert LINE1 in contents and LINE1 + LINE2 in contents


def test_marks_split_states_that_have_the_same_bytes():
    ops = [*_created(), Op("mark", mark={"kind": "effect"})]
    found = list(explore(Trace(ops)))
    before = {f.state.digest() for f in found if f.point < len(ops)}
    after = [f.state.digest() for f in found if f.point == len(ops)]
    assert len(after) == 1 and after[0] in before


def test_large_points_are_sampled_within_budget_and_reproducibly():
    big = b"".join(b'{"n":%d}\n' % n for n in range(200))
    ops = [*_created(), Op("write", ino=1, offset=8, data=big)]
    tally = Tally()
    first = [f.state.digest() for f in explore(Trace(ops), per_point=50, seed=7, tally=tally)]
    again = [f.state.digest() for f in explore(Trace(ops), per_point=50, seed=7)]
    assert first == again
    assert tally.sampled_points >= 1 and tally.generated <= 50 * tally.points
    *_, frontier = frontiers(Trace(ops))
    states, whole = point_states(frontier, per_point=50, rng=random.Random(7))
    assert not whole and 40 <= len(states) <= 50
    assert FileFuture(LINE1, (ops[-1],)).size_of_space() > 50


def test_frontiers_walk_every_point():
    ops = _created()
    assert [f.point for f in frontiers(Trace(ops))] == list(range(len(ops) + 1))


def test_the_readme_example_runs_and_catches_a_missing_directory_sync(tmp_path, monkeypatch):
    """The README's session for a third-party store is true, and has teeth."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))  # where its mkdtemp() goes
    readme = (Path(__file__).parent / "powerloss" / "README.md").read_text()
    code = readme.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    broken = code.replace("    disk.fsync_dir(directory)\n", "")
    assert broken != code
    with pytest.raises(AssertionError):
        exec(compile(broken, "README.md", "exec"), {"__name__": "readme"})
    unsynced = code.replace("        disk.fsync(fd)\n", "")
    assert unsynced != code
    with pytest.raises(AssertionError):
        exec(compile(unsynced, "README.md", "exec"), {"__name__": "readme"})
