"""Kill inside a product write at every disk call: never a visible partial product, resume consistent.

A calibration run of `artifact_child.py` lists every disk call of the run;
in the first product write (which creates the run's product folder) and the
last (which replaces a product and supersedes its reference), every call
from the first one of the write to the end of the append of its `artifact`
record is a kill point (a real SIGKILL of a real process just before that
call; for the writes, also after half the bytes landed).
After each kill the product is absent or one whole version, `polyloop
verify` finds nothing corrupt and no bad product, and `polyloop resume`
finishes the run with the final product and its reference in agreement.
By default the first write is killed at every call and the last one halfway
through its two writes; CI's slow tests kill the last write at every call too.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from support.cli import console_script, polyloop_in_process
from support import forking

HERE = Path(__file__).resolve().parent
CHILD = HERE / "artifact_child.py"
sys.path.insert(0, str(HERE))
from artifact_child import SUMMARY, V1, V2  # noqa: E402

RUN = "pipe"


def polyloop(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("POLYLOOP_", "PYTEST_"))}
    if args[0] in ("inspect", "verify"):  # reading: in this process (only the child is killed)
        done = polyloop_in_process(*args, env=env)
        return subprocess.CompletedProcess(list(args), done.code, done.stdout, done.stderr)
    return forking.run([*console_script(), *args], capture_output=True, text=True, timeout=120, env=env,
                          stdin=subprocess.DEVNULL)


def child(directory: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("POLYLOOP_", "PYTEST_"))}
    full.update(env)
    return forking.run([sys.executable, str(CHILD), str(directory), RUN], capture_output=True, text=True,
                          timeout=120, env=full, stdin=subprocess.DEVNULL)


def kill_points(root: Path) -> tuple[list[str], list[str]]:
    """(the first write's points and the reference, the superseding write's points)."""
    ops_file = root / "ops.txt"
    done = child(root / "calibrate", ARTIFACT_OPS=str(ops_file))
    assert done.returncode == 0, done.stderr
    ops = [line.split(" ", 2) for line in ops_file.read_text().splitlines()]
    windows: list[list[str]] = []
    in_write = False
    for n, op, path in ops:
        if ".artifacts" in path and not in_write:
            in_write = True
            windows.append([])  # the first write starts with mkdir of the folder, then syncs its name
        if in_write:
            windows[-1].append(n)
            if op == "write":
                windows[-1].append(f"{n}:half")
            if op == "write" and path.endswith(f"{RUN}.jsonl"):
                in_write = False  # the artifact record's append is done (the held log stays open)
    assert len(windows) == 3, windows
    never = str(int(ops[-1][0]) + 1)  # never killed: the uninterrupted run, for reference
    return windows[0] + [never], windows[-1]


def scenario(root: Path, point: str) -> dict:
    where = root / point.replace(":", "_")
    runs = where / "runs"
    killed = child(runs, ARTIFACT_KILL=point)
    out: dict = {"point": point, "killed": killed.returncode == -9, "problems": []}
    folder = runs / f"{RUN}.artifacts"
    visible = sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) if folder.exists() else []
    product = (folder / "doc.json").read_bytes() if (folder / "doc.json").exists() else None
    summary = (folder / "summary.txt").read_bytes() if (folder / "summary.txt").exists() else None
    if visible not in ([], ["doc.json"], ["doc.json", "summary.txt"]) or product not in (None, V1, V2) \
            or summary not in (None, SUMMARY(V1)):
        out["problems"].append(f"a partial or stray product is visible: {visible} {product[:40] if product else None}")
    verify = polyloop("verify", str(runs), "--json") if (runs / f"{RUN}.jsonl").exists() else None
    if verify is not None:
        doc = json.loads(verify.stdout)
        if doc["summary"]["corrupt"] or doc["summary"]["bad_product"]:
            out["problems"].append(f"verify after the kill: {verify.stdout}")
        resumed = polyloop("resume", RUN, "--dir", str(runs))
    else:  # killed before the log existed: start again
        resumed = subprocess.CompletedProcess([], child(runs).returncode, "", "")
    if resumed.returncode != 0:
        out["problems"].append(f"resume exit {resumed.returncode}: {resumed.stderr}")
    final = (folder / "doc.json").read_bytes() if (folder / "doc.json").exists() else None
    if final != V2 or (folder / "summary.txt").read_bytes() != SUMMARY(V1):
        out["problems"].append("the finished run's products are not the final versions")
    inspect = json.loads(polyloop("inspect", RUN, "--dir", str(runs), "--json").stdout)
    arts = {a["name"]: a for a in inspect["artifacts"]}
    if inspect["status"] != "finished" or arts.get("doc.json", {}).get("sha256") != hashlib.sha256(V2).hexdigest() \
            or sorted(arts) != ["doc.json", "summary.txt"] or not all(a["ok"] for a in arts.values()):
        out["problems"].append(f"inspect after resume: {inspect['status']} {inspect['artifacts']}")
    after = json.loads(polyloop("verify", str(runs), "--json").stdout)
    if after["summary"]["ok"] != 1:
        out["problems"].append(f"verify after resume: {after}")
    return out


def outcomes_at(root: Path, points: list[str]) -> dict[str, dict]:
    with ThreadPoolExecutor(max(2, os.cpu_count() or 2)) as pool:
        return {o["point"]: o for o in pool.map(lambda p: scenario(root, p), points)}


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> tuple[Path, list[str], list[str]]:
    root = tmp_path_factory.mktemp("artifact-kills")
    return root, *kill_points(root)


@pytest.fixture(scope="module")
def outcomes(world):
    """The first product write (it creates the folder) at every call, and the superseding write's
    two writes cut halfway; CI's slow test kills at the superseding write's other calls too."""
    root, first, superseding = world
    return outcomes_at(root, first + [p for p in superseding if p.endswith(":half")])


def test_the_calibration_finds_both_product_writes(world):
    # first write: the folder's name synced, mkdir... rename, folder synced, then the record's append;
    # the superseding write the same without the folder. And every write also killed halfway.
    # (How many calls that is depends on the store: a held log stays open, so the record's append
    # is one write.) Each window has two writes, the product's and the record's, each also cut.
    _, first, superseding = world
    points = first + superseding
    assert sum(p.endswith(":half") for p in points) == 4 and len(points) >= 2 * 8 + 1, sorted(points)


def test_every_call_of_the_first_product_write_is_a_kill_point(outcomes):
    killed = [o for o in outcomes.values() if o["killed"]]
    assert len(killed) == len(outcomes) - 1  # all but the uninterrupted reference run


def test_no_partial_product_and_resume_is_consistent_at_every_point(outcomes):
    failed = {p: o["problems"] for p, o in outcomes.items() if o["problems"]}
    assert not failed, json.dumps(failed, indent=1)[:4000]


@pytest.mark.slow
def test_every_call_of_the_superseding_write_is_a_kill_point_too(world):
    root, _, superseding = world
    rest = outcomes_at(root, [p for p in superseding if not p.endswith(":half")])
    assert all(o["killed"] for o in rest.values()), sorted(rest)
    failed = {p: o["problems"] for p, o in rest.items() if o["problems"]}
    assert not failed, json.dumps(failed, indent=1)[:4000]
