"""Every refusal of `polyloop batch` that gives advice: the advice, followed literally, gets past it.

Each test triggers one refusal with the real `polyloop batch`, reads the ways
forward its message names, does what one says (an edit of the goals file, a
new --name or target, a restored manifest) and runs the batch again. A piece
of advice `Invocation.follow` does not know fails the test: new advice is
taught here, so it is followed at least once.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from batch_helpers import Done, World

from polyloop._fleet.manifest import batch_lock


@pytest.fixture
def world(tmp_path) -> World:
    return World(tmp_path)


def ways(reason: str) -> list[str]:
    """The ways forward a refusal names: the clause after its last '; ' (or ': '), split at ', or '."""
    tail = re.split(r"; |: ", reason)[-1]
    return [w.strip() for w in tail.split(", or ")]


@dataclass
class Invocation:
    """One `polyloop batch` command line and the JSONL goals file it reads."""

    world: World
    agent: str
    lines: list[dict[str, Any]]
    args: tuple[str, ...] = ()
    saved: dict[str, bytes] = field(default_factory=dict)  # files as they were, for "restore"

    @property
    def goals(self) -> Path:
        return self.world.root / "goals.jsonl"

    def run(self) -> dict[str, Any]:
        self.goals.write_text("".join(json.dumps(x) + "\n" for x in self.lines))
        done = self.world.batch(self.agent, self.goals, "--json", *self.args)
        assert done.code in (0, 1), done
        return done.json()

    def keep(self) -> None:
        """Remember the goals file and the manifests as they are now (what "restore" puts back)."""
        self.saved = {p.name: p.read_bytes() for p in [self.goals, *self.world.runs.glob(".batch-*.json")]}

    def follow(self, way: str, line: int, reason: str = "") -> Invocation:
        """The invocation after doing what `way` (one of `reason`'s ways) says, for the goals file's line `line`."""
        lines = [dict(x) for x in self.lines]
        args = self.args
        if way.startswith("restore"):
            for name, data in self.saved.items():
                (self.world.root if name == self.goals.name else self.world.runs).joinpath(name).write_bytes(data)
            lines = [json.loads(x) for x in self.saved[self.goals.name].decode().splitlines()]
            return replace(self, lines=lines)
        if way.startswith("run the batch with that target"):
            named = re.search(r"agent target ([^\s,]+), not", reason)
            assert named is not None, reason
            path, _, agent = named.group(1).rpartition(":")
            assert Path(path).name == "agents.py", named
            return replace(self, agent=agent)
        renamed = False
        if "a new --name" in way:
            args = (*args, "--name", f"next{len(args)}")
            renamed = True
        if re.search(r'(this line (a new|another) "run_id")', way):
            lines[line - 1]["run_id"] = f"fresh-{line}-{len(args)}"
        elif not renamed:
            raise AssertionError(f"advice this test does not know how to follow: {way!r}")
        return replace(self, lines=lines, args=args)


def at(doc: dict[str, Any], line: int) -> dict[str, Any]:
    return next(r for r in doc["runs"] if r["line"] == line)


def proceeds(doc: dict[str, Any], line: int) -> None:
    run = at(doc, line)
    assert run["status"] == "finished" and run["action"] == "started", run


# -- item 8: a line's own run id that names another target's run ---------------------


@pytest.mark.parametrize("way", [0, 1], ids=["another-run-id", "no-run-id"])
def test_a_run_id_of_another_targets_run_is_given_advice_that_works(world, way):
    first = Invocation(world, "quick", [{"goal": "g1", "run_id": "mine"}, {"goal": "g2"}])
    assert first.run()["outcome"] == "finished"
    other = Invocation(world, "stamper", first.lines, ("--name", "other"))
    run = at(other.run(), 1)
    assert run["status"] == "changed" and "was started by the agent target" in run["reason"], run
    assert ways(run["reason"]) == ['give this line another "run_id" (or remove it)']
    again = replace(other, lines=[dict(x) for x in other.lines])
    if way == 0:
        again.lines[0]["run_id"] = "mine-again"
    else:
        del again.lines[0]["run_id"]
    doc = again.run()
    proceeds(doc, 1)
    assert doc["outcome"] == "finished"


def test_a_generated_run_id_of_another_goals_run_is_given_advice_that_works(world):
    first = Invocation(world, "quick", [{"goal": "alpha"}])
    assert first.run()["outcome"] == "finished"
    (world.runs / ".batch-goals.json").unlink()  # a lost manifest: the log is all there is
    changed = Invocation(world, "quick", [{"goal": "omega"}])
    run = at(changed.run(), 1)
    assert run["status"] == "changed" and "exists with another goal" in run["reason"], run
    assert ways(run["reason"]) == ["restore the line", "give the batch a new --name"]
    proceeds(changed.follow("give the batch a new --name", 1).run(), 1)


def test_another_target_refused_by_the_planner_is_got_past_either_way(world):
    first = Invocation(world, "quick", [{"goal": "g1", "run_id": "mine"}, {"goal": "g2"}])
    assert first.run()["outcome"] == "finished"
    other = Invocation(world, "stamper", first.lines)
    doc = other.run()
    assert {r["status"] for r in doc["runs"]} == {"changed"}
    own, generated = at(doc, 1), at(doc, 2)
    assert ways(generated["reason"]) == ["run the batch with that target", "give the batch a new --name"]
    assert ways(own["reason"])[0] == "run the batch with that target"
    # The line's own run id needs changing as well as the name: say so on that line.
    back = other.follow(ways(own["reason"])[0], 1, own["reason"]).run()
    assert back["outcome"] == "finished" and {r["action"] for r in back["runs"]} == {"skipped"}
    renamed = other.follow(ways(own["reason"])[1], 1)
    doc = renamed.run()
    proceeds(doc, 1)
    proceeds(doc, 2)


# -- lines the manifest recorded otherwise ---------------------------------------------


@pytest.mark.parametrize("own", [True, False], ids=["own-run-id", "generated-run-id"])
@pytest.mark.parametrize("way", [0, 1], ids=["restore", "rename"])
def test_a_changed_line_is_got_past_by_its_advice(world, own, way):
    first = Invocation(world, "quick", [{"goal": "g1", **({"run_id": "mine"} if own else {})}, {"goal": "g2"}])
    assert first.run()["outcome"] == "finished"
    first.keep()
    changed = replace(first, lines=[{**first.lines[0], "goal": "g1, changed"}, first.lines[1]])
    run = at(changed.run(), 1)
    assert run["status"] == "changed" and "the goals file changed" in run["reason"], run
    options = ways(run["reason"])
    assert options[0] == "restore the goals file"
    doc = changed.follow(options[way], 1).run()
    if way == 0:
        assert doc["outcome"] == "finished" and at(doc, 1)["action"] == "skipped"
    else:
        proceeds(doc, 1)


@pytest.mark.parametrize("edit", ["insert", "remove"])
@pytest.mark.parametrize("way", [0, 1], ids=["restore", "rename"])
def test_a_moved_line_and_a_gone_line_are_got_past_by_their_advice(world, edit, way):
    first = Invocation(world, "quick", [{"goal": "a"}, {"goal": "b"}])
    assert first.run()["outcome"] == "finished"
    first.keep()
    edited = replace(first, lines=[{"goal": "new first line"}, *first.lines] if edit == "insert" else [])
    if edit == "remove":
        edited.lines = [first.lines[0]]
    doc = edited.run()
    refused = at(doc, 3) if edit == "insert" else next(r for r in doc["runs"] if r["line"] == 2)
    assert ("so it moved" if edit == "insert" else "is gone") in refused["reason"], refused
    options = ways(refused["reason"])
    assert len(options) == 2 and options[0].startswith("restore"), options
    assert edited.follow(options[way], refused["line"]).run()["outcome"] == "finished"


@pytest.mark.parametrize("own", [True, False], ids=["own-run-id", "generated-run-id"])
def test_an_ended_run_is_run_again_as_its_advice_says(world, own):
    first = Invocation(world, "broken", [{"goal": "g", **({"run_id": "mine"} if own else {})}])
    run = at(first.run(), 1)
    assert run["status"] == "failed" and "the run is over" in run["reason"], run
    again = first.follow(run["reason"].rsplit("to run the line again, ", 1)[1], 1)
    run = at(again.run(), 1)
    assert run["action"] == "started", run  # a new run, not the ended one skipped again


# -- refusals before anything runs ---------------------------------------------------------


def test_a_duplicate_run_id_is_got_past_by_its_advice(world):
    first = Invocation(world, "quick", [{"goal": "a", "run_id": "x"}, {"goal": "b", "run_id": "x"}])
    run = at(first.run(), 2)
    assert run["status"] == "invalid" and ways(run["reason"]) == ['give this line another "run_id"']
    doc = first.follow(ways(run["reason"])[0], 2).run()
    proceeds(doc, 2)


def test_an_unsafe_run_id_is_got_past_by_its_advice(world):
    first = Invocation(world, "quick", [{"goal": "a", "run_id": ".hidden/x"}])
    run = at(first.run(), 1)
    assert run["status"] == "invalid" and "use letters, digits, '.', '_' and '-' only" in run["reason"]
    proceeds(replace(first, lines=[{"goal": "a", "run_id": "hidden-x"}]).run(), 1)


@pytest.mark.parametrize(
    ("name", "fixed"), [(".dot", "dot"), ("a b", "a-b"), ("n" * 151, "n" * 150)], ids=["dot", "space", "long"]
)
def test_an_unusable_batch_name_is_got_past_by_its_advice(world, name, fixed):
    goals = world.goals(["a"])
    done = world.batch("quick", goals, "--name", name)
    assert done.code == 2 and len(done.stderr.splitlines()) == 1, done
    assert "use letters, digits" in done.stderr or "give a shorter --name" in done.stderr
    assert world.batch("quick", goals, "--name", fixed).code == 0


@pytest.mark.parametrize("damage", [b"{not json", b'{"version": 99, "runs": {}}\n'], ids=["garbage", "version"])
@pytest.mark.parametrize("way", [0, 1], ids=["restore", "rename"])
def test_an_unreadable_manifest_is_got_past_by_its_advice(world, damage, way):
    first = Invocation(world, "quick", [{"goal": "a"}])
    assert first.run()["outcome"] == "finished"
    first.keep()
    (world.runs / ".batch-goals.json").write_bytes(damage)
    done = world.batch("quick", first.goals, "--json")
    assert done.code == 2, done
    message = json.loads(done.stdout)["error"]["message"] if done.stdout else done.stderr
    options = ways(message)
    assert options == ["restore it", "give the batch a new --name"], message
    assert first.follow(options[way], 1).run()["outcome"] == "finished"


def test_a_batch_already_running_is_got_past_by_waiting_for_it(world):
    goals = world.goals(["a"])
    world.runs.mkdir()
    with batch_lock(world.runs, "goals"):
        done = world.batch("quick", goals)
    assert done.code == 2 and done.stderr.rstrip().endswith("wait for it to end"), done
    assert world.batch("quick", goals).code == 0  # it ended (the hold above is let go)


def test_bad_lines_are_got_past_by_doing_what_each_message_asks(world):
    path = world.root / "goals.jsonl"
    path.write_text('{"goal": "fine"}\n[1]\n{"run_id": "no-goal"}\n{"goal": "g", "inputs": ["a"]}\n')
    doc = world.batch("quick", path, "--json").json()
    reasons = {r["line"]: r["reason"] for r in doc["runs"] if r["status"] == "invalid"}
    assert "not a JSON object" in reasons[2] and '"goal" (a string is required)' in reasons[3]
    assert '"inputs" must be an object of input names to file or directory paths' in reasons[4]
    (world.root / "a.txt").write_text("a")
    path.write_text(
        '{"goal": "fine"}\n{"goal": "an object now"}\n{"run_id": "no-goal", "goal": "g3"}\n'
        '{"goal": "g", "inputs": {"a": "a.txt"}}\n'
    )
    again = world.batch("quick", path, "--json").json()
    assert again["outcome"] == "finished", again
    assert [r["action"] for r in again["runs"]] == ["skipped", "started", "started", "started"]


def test_a_lease_on_a_directory_is_got_past_by_dropping_it(world):
    goals = world.goals(["a"])
    done: Done = world.batch("quick", goals, "--lease", "5")
    assert done.code == 2 and "--lease applies to a PostgreSQL store" in done.stderr, done
    assert world.batch("quick", goals).code == 0


def test_the_summary_of_refused_lines_does_not_promise_a_plain_rerun(world):
    first = Invocation(world, "quick", [{"goal": "g1", "run_id": "mine"}])
    assert first.run()["outcome"] == "finished"
    done = world.batch("stamper", first.goals)
    assert done.code == 1
    assert "then: do what each line above says" in done.stdout and "(or give the batch a new --name)" not in done.stdout
