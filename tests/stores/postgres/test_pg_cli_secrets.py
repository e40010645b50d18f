"""A secret in a `--store` URL never reaches the output: not a header, a JSON document, an error or a command to paste.

libpq takes a password in the userinfo (`user:PW@`) and in the query
(`?password=PW`, `sslpassword`, `oauth_client_secret`). The test server trusts
loopback, so a password in the URL is carried and ignored: each command really
runs. The commands printed leave the secrets out and still work when pasted,
the password then coming from PGPASSWORD (or ~/.pgpass), as a note says.
"""

from __future__ import annotations

import shlex

import pytest

from pg_helpers import fresh_ids
from test_pg_ls import Done, polyloop
from support import ROOT

DEMO = str(ROOT / "examples" / "demo.py") + ":agent"
PAYER = str(ROOT / "tests" / "cli" / "approval_agents.py") + ":payer"
SECRET, SSL_SECRET = "s3cretPW", "k3yPW"


def _userinfo(url: str) -> str:
    user_host = url.split("://", 1)[1]
    return url.replace(user_host, user_host.replace("postgres@", f"postgres:{SECRET}@", 1), 1)


def _query(url: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}password={SECRET}&sslpassword={SSL_SECRET}"


FORMS = {"userinfo": _userinfo, "query": _query}


def _clean(*done: Done) -> None:
    for d in done:
        assert SECRET not in d.stdout + d.stderr and SSL_SECRET not in d.stdout + d.stderr, d


def _pasted(line: str) -> list[str]:
    """The command of a printed line (`    polyloop ...  # what it means`), as argv after `polyloop`."""
    argv = shlex.split(line.strip(), comments=True)
    assert argv[0] == "polyloop", line
    return ["checked" if word == "TEXT" else word for word in argv[1:]]  # the operator gives the reason


@pytest.mark.parametrize("form", FORMS)
def test_no_command_prints_a_secret_of_the_store_url(own_db, tmp_path, form):
    assert "postgres@" in own_db, own_db
    url = FORMS[form](own_db)
    run_id, paid = fresh_ids("pw", 2)
    out: list[Done] = []

    def pl(*args: str, **kw) -> Done:
        done = polyloop(*args, cwd=tmp_path, **kw)
        out.append(done)
        return done

    crashed = pl("run", DEMO, "--run-id", run_id, "--goal", "g", "--store", url, env={"POLYLOOP_DEMO_CRASH": "1"})
    assert crashed.code == -9, crashed  # the demo's write_file kills its process once the file is written
    assert "log: postgresql://postgres@" in crashed.stdout + crashed.stderr, crashed
    inspected = pl("inspect", run_id, "--store", url)
    assert pl("inspect", run_id, "--store", url, "--json").json()["status"] == "needs_operator"
    assert pl("resume", run_id, "--store", url).code == 3
    assert pl("ls", "--store", url).code == 0 and pl("ls", "--store", url, "--json").code == 0
    assert pl("verify", "--store", url).code == 0 and pl("verify", "--store", url, "--json").code == 0
    # A command printed by inspect, pasted with the password where libpq looks for it.
    [settle] = [line for line in inspected.stdout.splitlines() if "--not-executed --reason TEXT --store" in line]
    assert "--store 'postgresql://postgres@" in settle, settle
    assert "PGPASSWORD" in inspected.stderr, inspected.stderr  # the note says where the password comes from
    assert pl(*_pasted(settle), env={"PGPASSWORD": SECRET}).code == 0

    waits = pl("run", PAYER, "--run-id", paid, "--goal", "pay", "--store", url,
               env={"APPROVAL_TEST_EFFECTS": str(tmp_path / "paid")})
    assert waits.code == 3, waits
    request = pl("inspect", paid, "--store", url, "--json").json()["waiting"][0]["id"]
    assert pl("approve", paid, request, "--reason", "ok", "--store", url).code == 0

    goals = tmp_path / "goals.txt"
    goals.write_text("write up the notes\n")
    batch = pl("batch", DEMO, str(goals), "--store", url, "--json", "--processes", "1", timeout=120)
    assert batch.code == 0, batch
    assert batch.json()["directory"].startswith("postgresql://postgres@")
    [queued] = fresh_ids("pwq", 1)
    assert pl("submit", PAYER, "--goal", "pay", "--run-id", queued, "--store", url).code == 0
    work = pl("worker", "--store", url, "--until-idle", "--poll", "0.05",
              env={"APPROVAL_TEST_EFFECTS": str(tmp_path / "paid")}, timeout=120)
    assert work.code == 0 and "run them with --store 'postgresql://postgres@" in work.stdout, work
    _clean(*out)


def test_a_store_from_polyloop_store_is_left_out_of_the_commands_and_needs_no_note(own_db, tmp_path):
    url = _query(own_db)
    [run_id] = fresh_ids("pwenv", 1)
    env = {"POLYLOOP_STORE": url}
    crashed = polyloop("run", DEMO, "--run-id", run_id, "--goal", "g", cwd=tmp_path,
                       env={**env, "POLYLOOP_DEMO_CRASH": "1"})
    assert crashed.code == -9, crashed
    inspected = polyloop("inspect", run_id, cwd=tmp_path, env=env)
    [settle] = [line for line in inspected.stdout.splitlines()
                if line.strip().startswith("polyloop mark-resolved") and "--not-executed" in line]
    assert "--store" not in settle and "note:" not in inspected.stderr, inspected
    assert polyloop(*_pasted(settle), cwd=tmp_path, env=env).code == 0
    _clean(crashed, inspected)


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://postgres:{SECRET}%zz@127.0.0.1:5432/test",  # libpq quotes the bad token
        f"postgresql://postgres:{SECRET}@[::1/test",  # libpq quotes the whole URL
        f"postgresql://postgres@127.0.0.1:5432/test?password={SECRET}%zz",
    ],
)
def test_a_drivers_error_that_quotes_the_url_is_shown_without_its_secret(url, tmp_path):
    for args in (["ls", "--store", url, "--json"], ["inspect", "x", "--store", url]):
        done = polyloop(*args, cwd=tmp_path)
        assert done.code == 1 and "PostgreSQL" in done.stderr, done
        _clean(done)
