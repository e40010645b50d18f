"""What a pip user gets: the sdist and the wheel as built, and the wheel installed outside the repository.

The distributions are built the way a release is (`python -m build`: the sdist first, the wheel from
the unpacked sdist) from a copy of this checkout, with the build backend pyproject.toml names, in a
build environment of its own. The wheel is then installed with `--no-deps` into a fresh virtual
environment that sees this environment's packages (orjson, typer, ...) through a `.pth` line, which
never runs this checkout's editable-install hook: `polyloop` is the installed copy, and every command
runs in an empty directory with no `examples/` beside it.

Building and installing takes most of a minute of both cores: these tests are marked `slow`, run
by CI's second command (`pytest -m slow`), never skipped there.
"""

from __future__ import annotations

import email.parser
import fnmatch
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LEFT_OUT = ("__pycache__", "*.pyc", ".venv*", ".git", "runs", "demo-workspace", "build", "dist", "*.egg-info",
            ".pytest_cache", ".hypothesis", ".bench-tmp")
TIMEOUT = 300

pytestmark = pytest.mark.slow


@dataclass
class Built:
    sdist: Path
    wheel: Path


def _run(*args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"{args} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    top = tmp_path_factory.mktemp("build")
    source = top / "polyloop"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*LEFT_OUT), symlinks=True)
    tools = top / "build-env"
    _run(sys.executable, "-m", "venv", tools)
    # The backend pyproject.toml asks for, and the usual front end: from the package index pip is set up with.
    _run(tools / "bin" / "pip", "install", "-q", "build", "setuptools>=77")
    out = top / "dist"
    _run(tools / "bin" / "python", "-m", "build", "--no-isolation", "--outdir", out, source)
    (sdist,) = out.glob("polyloop-*.tar.gz")
    (wheel,) = out.glob("polyloop-*.whl")
    return Built(sdist, wheel)


@dataclass
class Installed:
    bin: Path
    cwd: Path

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("POLYLOOP_", "PYTEST_", "VIRTUAL_ENV"))}
        env["PATH"] = f"{self.bin}{os.pathsep}{env.get('PATH', '')}"
        env.pop("PYTHONPATH", None)
        return env | extra

    def polyloop(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.bin / "polyloop"), *args], cwd=self.cwd, env=self.env(**env),
                              capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def installed(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    top = tmp_path_factory.mktemp("pip-user")
    venv = top / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    _run(sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-index", built.wheel)
    # The dependencies, from this environment: its site directories appended to the new one's path.
    # A directory named in a .pth file has its own .pth files ignored, so this checkout's
    # editable-install hook never runs there.
    site = Path(_run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip())
    here = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "_polyloop_test_deps.pth").write_text("".join(f"{p}\n" for p in sorted(here)))
    cwd = top / "somewhere-else"
    cwd.mkdir()
    return Installed(venv / "bin", cwd)


def _sdist_names(built: Built) -> set[str]:
    with tarfile.open(built.sdist) as tar:
        return {name.partition("/")[2] for name in tar.getnames()}


def _repo_files(folder: str) -> set[str]:
    found = set()
    for path in (ROOT / folder).rglob("*"):
        rel = path.relative_to(ROOT)
        if path.is_file() and not any(fnmatch.fnmatch(part, pat) for part in rel.parts for pat in LEFT_OUT):
            found.add(rel.as_posix())
    return found


def test_the_sdist_holds_the_tests_the_docs_the_examples_and_the_license(built: Built) -> None:
    names = _sdist_names(built)
    for folder in ("tests", "docs", "examples", "tools", "benchmarks", "polyloop", "cli"):
        missing = sorted(_repo_files(folder) - names)
        assert not missing, f"the sdist leaves out of {folder}/: {missing[:10]}"
    assert {"LICENSE", "README.md", "pyproject.toml", ".ci/run"} <= names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_the_wheel_holds_the_library_the_cli_the_demo_and_the_license(built: Built) -> None:
    with zipfile.ZipFile(built.wheel) as whl:
        names = set(whl.namelist())
        license_text = whl.read("polyloop-0.1.0.dist-info/licenses/LICENSE").decode()
    assert {"polyloop/__init__.py", "polyloop/py.typed", "polyloop/examples/demo.py", "polyloop_cli/main.py",
            "polyloop_cli/demo.py", "polyloop/_serve/templates/run.html", "polyloop/_serve/static/console.js",
            "polyloop/_serve/static/console.css"} <= names
    assert license_text == (ROOT / "LICENSE").read_text() and license_text.startswith("MIT License")
    tops = {n.split("/")[0] for n in names}
    assert tops == {"polyloop", "polyloop_cli", "polyloop-0.1.0.dist-info"}, tops  # no bare `cli`, `tests`


def test_the_metadata_says_license_pythons_typing_urls_and_keywords(built: Built) -> None:
    with zipfile.ZipFile(built.wheel) as whl:
        meta = email.parser.Parser().parsestr(whl.read("polyloop-0.1.0.dist-info/METADATA").decode())
    assert meta["License-Expression"] == "MIT"
    assert meta["Requires-Python"] == ">=3.11"
    classifiers = set(meta.get_all("Classifier"))
    for version in ("3.11", "3.12", "3.13"):
        assert f"Programming Language :: Python :: {version}" in classifiers
    assert "Typing :: Typed" in classifiers
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL"))
    assert {"Homepage", "Documentation", "Source", "Issues"} <= set(urls)
    assert "durable-execution" in meta["Keywords"].split(",")
    assert "mcp" in meta.get_all("Provides-Extra")
    assert any(r.startswith("mcp") and 'extra == "mcp"' in r for r in meta.get_all("Requires-Dist"))


def test_the_core_and_the_cli_never_import_the_mcp_sdk() -> None:
    # `polyloop.mcp` itself imports the SDK only when a server is first started.
    code = ("import sys, polyloop, polyloop.stores, polyloop.testing, polyloop.mcp, polyloop_cli.main; "
            "print(sorted(m for m in ('mcp', 'mcp_types', 'jsonschema') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_polyloop_demo_runs_from_the_installed_wheel_outside_the_repository(installed: Installed) -> None:
    where = subprocess.run([str(installed.bin / "python"), "-c", "import polyloop, polyloop_cli; "
                            "print(polyloop.__file__); print(polyloop_cli.__file__)"],
                           cwd=installed.cwd, env=installed.env(), capture_output=True, text=True, timeout=60)
    assert where.returncode == 0, where.stderr
    assert all(line.startswith(str(installed.bin.parent)) for line in where.stdout.split()), where.stdout

    done = installed.polyloop("demo")
    assert done.returncode == 0, done.stderr
    assert "finished: final answer after 5 steps" in done.stdout
    assert "Wrote notes.txt and collected its 2 TODOs in todo.txt." in done.stdout
    assert "POLYLOOP_DEMO_CRASH=1 polyloop demo" in done.stderr
    assert not (installed.cwd / "examples").exists()
    assert len(list((installed.cwd / "runs").glob("*.jsonl"))) == 1

    named = installed.polyloop("run", "polyloop.examples.demo:agent", "--run-id", "by-module", "--goal", "notes")
    assert named.returncode == 0, named.stderr
    assert (installed.cwd / "demo-workspace" / "by-module" / "todo.txt").exists()


def test_the_crash_walkthrough_works_from_the_installed_wheel(installed: Installed) -> None:
    crashed = installed.polyloop("demo", "--run-id", "crash-1", POLYLOOP_DEMO_CRASH="1")
    assert crashed.returncode == -9, crashed.stderr
    looked = installed.polyloop("inspect", "crash-1")
    assert looked.returncode == 0, looked.stderr
    assert "polyloop mark-resolved crash-1 s2-a1 --executed" in looked.stdout
    assert installed.polyloop("resume", "crash-1").returncode == 3
    settled = installed.polyloop("mark-resolved", "crash-1", "s2-a1", "--executed", "--reason", "notes.txt is there")
    assert settled.returncode == 0, settled.stderr
    resumed = installed.polyloop("resume", "crash-1")
    assert resumed.returncode == 0, resumed.stderr
    assert "finished: final answer after 5 steps" in resumed.stdout
    assert "write_file notes.txt" not in resumed.stderr  # the write is not done twice


def test_the_repository_demo_path_outside_the_repository_points_at_polyloop_demo(installed: Installed) -> None:
    done = installed.polyloop("run", "examples/demo.py:agent", "--goal", "write up the notes")
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "no file examples/demo.py" in lines[0]
    assert "`polyloop demo`" in lines[0] and "polyloop.examples.demo:agent" in lines[0]
