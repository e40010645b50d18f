"""Enumerating the crash states of a trace: exhaustively where small, a seeded sample where not.

At every crash point (before the first op and after each op) the model
(model.py) allows a set of disk states: which pending names survive, and
for every file with unsynced data where its cut falls and whether its
unsynced tail reads as NUL. Where that set has at most `per_point`
members it is enumerated whole. Where it is larger, the explorer takes
the *boundary* choices first — no unsynced data, all of it, a cut at 1
byte, one byte short, at and just after every newline, each with no NUL,
all NUL, or NUL from the last line's start — and fills the rest of the
budget with choices drawn by a `random.Random(seed)`: the same trace
gives the same states.

States are deduplicated by `(digest, marks)`: the content hash of the
directory tree, and how many marks (side effects, paid calls,
acknowledged writes) precede the crash point, since the same bytes on disk
must satisfy more checks once more has been acknowledged.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass, field

from .model import CrashState, FileFuture, Frontier, frontiers, name_subsets
from .trace import Trace

Cut = tuple[int, int, int | None]  # (i, c, nul_from) of one file


@dataclass
class Tally:
    """What an exploration looked at."""

    points: int = 0
    exhaustive_points: int = 0
    sampled_points: int = 0
    generated: int = 0
    distinct: int = 0  # distinct (digest, marks)
    digests: set[str] = field(default_factory=set)  # distinct directory trees
    checked: int = 0  # states a checker looked at

    def add(self, other: Tally) -> None:
        self.points += other.points
        self.exhaustive_points += other.exhaustive_points
        self.sampled_points += other.sampled_points
        self.generated += other.generated
        self.distinct += other.distinct
        self.digests |= other.digests
        self.checked += other.checked

    def __str__(self) -> str:
        return (
            f"{self.points} crash points ({self.exhaustive_points} enumerated whole, "
            f"{self.sampled_points} sampled), {self.generated} states generated, "
            f"{self.distinct} distinct, {len(self.digests)} distinct directory trees, "
            f"{self.checked} checked"
        )


@dataclass(frozen=True, slots=True)
class Found:
    """A crash state and where it comes from: the trace and the number of ops done."""

    trace: Trace
    state: CrashState

    @property
    def point(self) -> int:
        return self.state.point


def explore(
    trace: Trace, *, per_point: int = 200, seed: int = 0, tally: Tally | None = None
) -> Iterator[Found]:
    """Every distinct crash state of `trace` under the model, at most `per_point` per crash point.

    Args:
        trace: the operations to explore.
        per_point: the budget of states per crash point; a point with at
            most this many states is enumerated whole.
        seed: the seed of the sample taken where a point has more.
        tally: counts are added here.
    """
    tally = tally if tally is not None else Tally()
    rng = random.Random(f"{seed}:{trace.label}")
    seen: set[tuple[str, int]] = set()
    marks = len(trace.world)
    for frontier in frontiers(trace):
        if frontier.point and trace.ops[frontier.point - 1].kind == "mark":
            marks += 1
        tally.points += 1
        states, whole = point_states(frontier, per_point=per_point, rng=rng)
        if whole:
            tally.exhaustive_points += 1
        else:
            tally.sampled_points += 1
        for state in states:
            tally.generated += 1
            digest = state.digest()
            if (digest, marks) in seen:
                continue
            seen.add((digest, marks))
            tally.distinct += 1
            tally.digests.add(digest)
            yield Found(trace, state)


def point_states(frontier: Frontier, *, per_point: int, rng: random.Random) -> tuple[list[CrashState], bool]:
    """The states of one crash point, and whether they are all of them."""
    dirty = {ino: f for ino, f in sorted(frontier.files.items()) if f.pending}
    n_names = len(frontier.pending_names)
    size = 2**n_names
    for f in dirty.values():
        size *= f.size_of_space()
        if size > per_point:
            break
    if size <= per_point:
        spaces = [list(name_subsets(n_names)), *(all_cuts(f) for f in dirty.values())]
        combos = list(itertools.product(*spaces))
        return [_build(frontier, dirty, combo) for combo in combos], True
    chosen: dict[tuple, None] = {}
    edges = [_edge_subsets(n_names), *(boundary_cuts(f) for f in dirty.values())]
    edge_combos = list(itertools.product(*edges))
    rng.shuffle(edge_combos)
    for combo in edge_combos[: per_point // 2]:
        chosen[combo] = None
    points = {ino: f.points() for ino, f in dirty.items()}
    for _ in range(per_point * 4):
        if len(chosen) >= per_point:
            break
        names = tuple(rng.random() < 0.5 for _ in range(n_names))
        combo = (names, *(random_cut(f, points[ino], rng) for ino, f in dirty.items()))
        chosen.setdefault(combo, None)
    return [_build(frontier, dirty, combo) for combo in chosen], False


def _build(frontier: Frontier, dirty: dict[int, FileFuture], combo: tuple) -> CrashState:
    names, *cuts = combo
    contents = {ino: f.render(*cut) for (ino, f), cut in zip(dirty.items(), cuts)}
    return frontier.state(names, contents)


def all_cuts(f: FileFuture) -> list[Cut]:
    """Every cut of one file: each (i, c), with no NUL and with NUL from each unsynced offset."""
    out: list[Cut] = []
    for i, c in f.points():
        data, low = f.content(i, c)
        out.append((i, c, None))
        out.extend((i, c, j) for j in range(low, len(data)))
    return out


def boundary_cuts(f: FileFuture) -> list[Cut]:
    """The cuts most likely to matter: at op ends, one byte in or short, and around newlines."""
    spots: set[tuple[int, int]] = {(len(f.pending), 0)}
    for i, op in enumerate(f.pending):
        if op.kind != "write":
            spots.add((i, 0))
            continue
        n = len(op.data)
        cs = {0, 1, n - 1}
        for p, byte in enumerate(op.data):
            if byte == 0x0A:
                cs.update((p, p + 1))
        spots.update((i, c) for c in cs if 0 <= c < n)
    out: list[Cut] = []
    for i, c in sorted(spots):
        data, low = f.content(i, c)
        line_start = data.rfind(b"\n", 0, len(data) - 1) + 1
        out.append((i, c, None))
        out.extend((i, c, j) for j in sorted({low, line_start}) if low <= j < len(data))
    return out


def random_cut(f: FileFuture, points: list[tuple[int, int]], rng: random.Random) -> Cut:
    """One cut drawn at random: a point, and half the time NUL from a random unsynced offset."""
    i, c = rng.choice(points)
    data, low = f.content(i, c)
    if low < len(data) and rng.random() < 0.5:
        return (i, c, rng.randrange(low, len(data)))
    return (i, c, None)


def _edge_subsets(count: int) -> list[tuple[bool, ...]]:
    if count <= 4:
        return list(name_subsets(count))
    singles = [tuple(k == n for k in range(count)) for n in range(count)]
    return [(False,) * count, (True,) * count, *singles]
