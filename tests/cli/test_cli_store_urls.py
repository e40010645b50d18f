"""A store given as a URL of a scheme PolyLoop does not serve is refused, never made into a folder.

`--store mysql://h/db` used to become `./mysql:/h/db/` with the run in it.
Every command that takes a store, through every way of giving one (`--store`,
`--dir`, `$POLYLOOP_STORE`, `$POLYLOOP_DIR`, verify's DIR), exits 2 with a
message naming the schemes it serves, and leaves the working directory as it
was. The URLs carry a password: a refusal never prints it either.
"""

from __future__ import annotations

import json

import pytest

from cli_helpers import Cli, target

SECRET = "hunter2pw"
REFUSED = {
    "mysql": f"mysql://u:{SECRET}@db.example/app",
    "sqlite": "sqlite:///x.db",
    "sqlalchemy": f"postgresql+psycopg://u:{SECRET}@127.0.0.1/test",
    "upper-case": f"POSTGRESQL://u:{SECRET}@127.0.0.1/test",
}

# Every command that takes a store, with the rest of its arguments.
COMMANDS = {
    "run": ["run", target("finishing"), "--goal", "g", "--run-id", "r1"],
    "resume": ["resume", "r1"],
    "inspect": ["inspect", "r1"],
    "inspect-json": ["inspect", "r1", "--json"],
    "ls": ["ls"],
    "verify": ["verify"],
    "batch": ["batch", target("finishing"), "goals.txt"],
    "submit": ["submit", target("finishing"), "--goal", "g"],
    "worker": ["worker", "--until-idle"],
    "mark-resolved": ["mark-resolved", "r1", "s1-a1", "--executed", "--reason", "checked"],
    "approve": ["approve", "r1", "s1-a1", "--reason", "ok"],
    "deny": ["deny", "r1", "s1-a1", "--reason", "no"],
    "answer": ["answer", "r1", "s1-a1", "blue"],
}
# submit and worker take only a PostgreSQL store: their --dir is refused for being a directory option.
TAKES_DIR = sorted(set(COMMANDS) - {"submit", "worker"})


def _refused(cli: Cli, args: list[str], *, env: dict[str, str] | None = None) -> None:
    before = sorted(p.name for p in cli.cwd.iterdir())
    done = cli(*args, env=env, dir=False)
    assert done.code == 2, done
    assert "unsupported store" in done.stderr and "postgresql://" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and SECRET not in done.stdout + done.stderr, done
    if "--json" in args:
        assert done.json()["error"]["type"] == "StoreUrlError" and done.json()["error"]["exit_code"] == 2
    assert sorted(p.name for p in cli.cwd.iterdir()) == before, "a folder was made for a URL"


@pytest.fixture
def cli(tmp_path):
    (tmp_path / "goals.txt").write_text("say hi\n")
    return Cli(cwd=tmp_path, runs=tmp_path / "runs")


@pytest.mark.parametrize("url", REFUSED.values(), ids=REFUSED.keys())
@pytest.mark.parametrize("command", COMMANDS, ids=COMMANDS.keys())
def test_a_store_option_of_another_scheme_is_refused(cli, command, url):
    _refused(cli, [*COMMANDS[command], "--store", url])


@pytest.mark.parametrize("command", TAKES_DIR)
def test_a_dir_option_that_is_a_url_of_another_scheme_is_refused(cli, command):
    _refused(cli, [*COMMANDS[command], "--dir", REFUSED["mysql"]])


@pytest.mark.parametrize(
    ("command", "variable"),
    # The queue's commands read $POLYLOOP_STORE only.
    [(c, "POLYLOOP_STORE") for c in COMMANDS] + [(c, "POLYLOOP_DIR") for c in TAKES_DIR],
)
def test_a_store_from_the_environment_of_another_scheme_is_refused(cli, command, variable):
    _refused(cli, COMMANDS[command], env={variable: REFUSED["mysql"]})


def test_verify_refuses_a_dir_argument_of_another_scheme(cli):
    _refused(cli, ["verify", REFUSED["sqlite"]])
    _refused(cli, ["verify", REFUSED["mysql"], "--json"])


def test_the_driver_suffix_gets_the_spelling_to_use(cli):
    done = cli("ls", "--store", REFUSED["sqlalchemy"], dir=False)
    assert done.code == 2 and "without the +driver" in done.stderr, done


@pytest.mark.parametrize("path", ["runs:old", "C://runs", "./mysql://h/db"])
def test_a_path_with_a_colon_that_is_no_url_stays_a_directory(cli, path):
    done = cli("run", target("finishing"), "--goal", "g", "--run-id", "kept", "--dir", path, dir=False)
    assert done.code == 0, done
    listed = cli("ls", "--dir", path, "--json", dir=False)
    assert [r["run_id"] for r in json.loads(listed.stdout)] == ["kept"], listed
