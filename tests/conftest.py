"""Shared fixtures: a fresh JSONL store per test, small agents, and the reliability tally."""

from __future__ import annotations

import compileall
import json
import os
import platform
import re
import signal
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

import polyloop
import polyloop_cli
from polyloop import JsonlStore
from polyloop.testing import MemoryStore

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def store(tmp_path) -> JsonlStore:
    return JsonlStore(tmp_path / "runs")


@pytest.fixture
def memory() -> MemoryStore:
    return MemoryStore()


# -- reliability figures (tests/crash, tests/property) -------------------------------------
#
# Crash, soak and fuzz tests add what they did to one session-wide tally; at the
# end of the session it is written as JSON to $POLYLOOP_RELIABILITY_REPORT (if
# set), and `tests/crash/report.py` renders it into docs/reliability.md.

_FIGURES = pytest.StashKey["Reliability"]()


class Reliability:
    """A tally of kills, recoveries, fuzz inputs and what went wrong (must stay 0)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.kill_points: set[str] = set()
        self.tests: set[str] = set()
        self.started = time.time()

    def add(self, name: str, n: int = 1) -> None:
        self.counts[name] += n

    def to_json(self, exitstatus: int) -> dict:
        return {
            "exitstatus": int(exitstatus),
            "seconds": round(time.time() - self.started, 1),
            "kill_points": sorted(self.kill_points),
            "tests": sorted(self.tests),
            "counts": dict(sorted(self.counts.items())),
            "platform": f"{platform.system()} {platform.release()}, Python {platform.python_version()}, "
            f"{os.cpu_count()} CPUs",
        }


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--soak-seconds",
        type=float,
        default=None,
        help="wall-clock budget of the random-kill soak (default: $POLYLOOP_SOAK_SECONDS, else 20)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_FIGURES] = Reliability()
    # A suite started in the background (`cmd &` in a script, some CI runners) inherits SIGINT
    # ignored, and an ignored signal stays ignored across exec: the Ctrl-C tests' processes would
    # never see their SIGINT. Their handler is the default one, as in a terminal.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # pytest keeps the test modules it rewrites (assertion messages) as .pyc files only where Python
    # may write bytecode; a machine that sets PYTHONDONTWRITEBYTECODE=1 for everything would have
    # every worker rewrite every test module again in every session (~15 s of a core each).
    sys.dont_write_bytecode = False
    if not hasattr(config, "workerinput"):  # the main process, before any xdist worker starts
        _compile_for_children()


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: a worker per core, and one more.

    A test spends much of its time waiting on the processes it starts (a
    `polyloop` command, a crash child, a server, a browser); a worker more than
    the cores keeps them busy meanwhile. Measured on 2 cores, whole suite, one
    run after the other: 2 workers 422 s, 3 workers 361 s, 4 workers 370 s.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return cores + 1


def _compile_for_children() -> None:
    """Byte-compile the code the tests' child processes import, once per session.

    The suite starts well over a thousand Python processes (`polyloop` commands,
    crash children), each importing the library, the command line and an agent
    file. Children that may not write .pyc files (PYTHONDONTWRITEBYTECODE=1, which
    tests/crash/crashkit.py sets and some machines set for everything) and find
    none compile every one of those modules again: about a quarter of a child's
    start-up. The .pyc files go where Python looks for them (`__pycache__`, or
    $PYTHONPYCACHEPREFIX) and are checked against their source as usual, so an
    edited file never runs stale. Test modules are left out (pytest rewrites
    them itself), and so is every file a test writes: those live in tmp dirs.
    """
    dirs = [Path(polyloop.__file__).parent, Path(polyloop_cli.__file__).parent,
            ROOT / "tests", ROOT / "examples"]
    skip = re.compile(r"(^|[\\/])(test_[^\\/]*|conftest)\.py$")
    for where in dirs:
        if where.is_dir():
            compileall.compile_dir(where, quiet=2, rx=skip, workers=1)


# The modules that take longest (8 to 40 s each, their tests' times summed from `--junitxml`),
# longest first. pytest-xdist hands a module's tests to one worker (`--dist loadscope`) in collection
# order: starting these first keeps a long module from starting last while the other core idles.
LONGEST_FIRST = (
    "tests/crash/test_powerloss.py",
    "tests/docs/test_doc_commands.py",
    "tests/fleet/batch/test_batch_advice.py",
    "tests/stores/postgres/test_pg_batch.py",
    "tests/serve/test_console_decides.py",
    "tests/stores/postgres/test_pg_worker_cli.py",
    "tests/fleet/batch/test_batch_cli.py",
    "tests/stores/postgres/test_pg_queue.py",
    "tests/stores/postgres/test_pg_faults.py",
    "tests/serve/test_console_security.py",
    "tests/stores/postgres/test_pg_ls.py",
    "tests/property/test_reader_fuzz.py",
    "tests/property/test_log_properties.py",
    "tests/crash/test_powerloss_teeth.py",
    "tests/cli/test_cli_ls.py",
    "tests/mcp/test_real_servers.py",
    "tests/crash/test_storage_faults.py",
    "tests/crash/test_archive_kill_points.py",
    "tests/stores/postgres/test_pg_workers.py",
    "tests/fleet/batch/test_batch_outage.py",
    "tests/docs/test_doc_python.py",
    "tests/cli/test_cli_outages.py",
    "tests/cli/test_cli_decisions.py",
    "tests/cli/test_cli_paste_anywhere.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest modules first (`LONGEST_FIRST`), every module's tests in their own order."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0].replace("\\", "/"), len(rank)))


@pytest.fixture
def reliability(request: pytest.FixtureRequest) -> Reliability:
    figures = request.config.stash[_FIGURES]
    figures.tests.add(request.node.nodeid)
    return figures


@pytest.fixture(scope="session")
def soak_seconds(pytestconfig: pytest.Config) -> float:
    value = pytestconfig.getoption("--soak-seconds")
    if value is None:
        value = float(os.environ.get("POLYLOOP_SOAK_SECONDS") or 20)
    return value


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    path = os.environ.get("POLYLOOP_RELIABILITY_REPORT")
    figures = session.config.stash.get(_FIGURES, None)
    if hasattr(session.config, "workeroutput"):  # an xdist worker: hand the tally to the main process
        if figures is not None:
            session.config.workeroutput["polyloop_reliability"] = {
                "counts": dict(figures.counts), "kill_points": sorted(figures.kill_points),
                "tests": sorted(figures.tests),
            }
        return
    if path and figures is not None and figures.tests:
        with open(path, "w") as f:
            json.dump(figures.to_json(exitstatus), f, indent=2)
            f.write("\n")


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """The main process of a parallel run (pytest-xdist) adds up its workers' tallies."""
    part = getattr(node, "workeroutput", {}).get("polyloop_reliability")
    figures = node.config.stash.get(_FIGURES, None)
    if part and figures is not None:
        figures.counts.update(part["counts"])
        figures.kill_points.update(part["kill_points"])
        figures.tests.update(part["tests"])
