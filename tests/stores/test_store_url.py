"""Store specs are classified and shown in one place (`polyloop/stores/_url.py`).

A directory or a `postgresql://` (`postgres://`) URL is served; any other
`scheme://` is refused with `StoreUrlError` by every function that takes a
store, before anything is created. The shown form of a URL has none of the
secrets libpq accepts in one.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from polyloop import Agent, JsonlStore, ScriptedModel, StoreUrlError, list_runs, run_batch
from polyloop.stores import open_store, redact_url, store_kind
from polyloop.stores._url import describe_url, hide_secrets
from support import TESTS

REFUSED = ["mysql://u:pw@h/db", "sqlite:///x.db", "postgresql+psycopg://u@h/db", "POSTGRES://h/db", "s3://bucket/x"]


@pytest.mark.parametrize(
    ("spec", "kind"),
    [
        ("runs", "directory"),
        ("./runs", "directory"),
        ("/var/lib/polyloop", "directory"),
        ("runs:old", "directory"),  # a ':' but no '://'
        ("C:\\runs", "directory"),
        ("C://runs", "directory"),  # a one-letter "scheme" is a Windows drive
        ("./mysql://h/db", "directory"),  # not at the start: a path
        ("postgresql://u@h/db", "postgresql"),
        ("postgres://h", "postgresql"),
        (Path("runs"), "directory"),
    ],
)
def test_served_specs_are_classified(spec, kind):
    assert store_kind(spec) == kind


@pytest.mark.parametrize("spec", REFUSED)
def test_other_schemes_are_refused_naming_the_served_ones_and_no_secret(spec):
    with pytest.raises(StoreUrlError) as caught:
        store_kind(spec)
    message = str(caught.value)
    assert "postgresql://" in message and "directory" in message
    assert "pw" not in message and caught.value.scheme == spec.partition("://")[0]


def test_a_driver_suffix_and_an_upper_case_scheme_get_the_spelling_to_use():
    with pytest.raises(StoreUrlError, match=r"without the \+driver"):
        store_kind("postgresql+asyncpg://h/db")
    with pytest.raises(StoreUrlError, match="lower case"):
        store_kind("PostgreSQL://h/db")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:pw@h/db", "postgresql://u@h/db"),
        ("postgresql://u:@h/db", "postgresql://u@h/db"),
        ("postgresql://u@h/db?password=pw", "postgresql://u@h/db"),
        ("postgresql://u@h/db?sslmode=require&password=pw&connect_timeout=3",
         "postgresql://u@h/db?sslmode=require&connect_timeout=3"),
        ("postgresql://u@h/db?%70assword=pw", "postgresql://u@h/db"),  # libpq decodes the keyword
        ("postgresql://h/db?sslpassword=pw&sslkey=/k.pem", "postgresql://h/db?sslkey=/k.pem"),
        ("postgresql://h/db?oauth_client_secret=pw&oauth_client_id=c", "postgresql://h/db?oauth_client_id=c"),
        ("postgres://u:p%40w@h1:5432,h2:5433/db?passfile=/p&options=-csearch_path%3Dx",
         "postgres://u@h1:5432,h2:5433/db?passfile=/p&options=-csearch_path%3Dx"),
        ("postgresql://u:p?w@h/db", "postgresql://u@h/db"),  # libpq ends the userinfo at '@', not '?'
        ("runs/with:pw@odd", "runs/with:pw@odd"),  # a directory is shown as given
    ],
)
def test_the_shown_url_drops_every_secret_and_keeps_the_rest(url, shown):
    assert redact_url(url) == shown


@pytest.mark.parametrize(
    ("url", "described"),
    [
        ("postgresql://u:pw@h/db?password=x", "u@h:5432/db"),
        ("postgresql://h:6543/db", "h:6543/db"),
        ("postgresql:///test?host=/var/run/postgresql&user=me", "me@/var/run/postgresql:5432/test"),
        ("postgres://[::1]:5433,h2/db", "[::1]:5433,h2:5432/db"),
        ("postgresql://", "localhost:5432/"),
    ],
)
def test_the_described_place_has_user_host_port_and_database_only(url, described):
    assert describe_url(url) == described


def test_a_drivers_message_loses_the_urls_secrets_however_it_quotes_them():
    url = "postgresql://u:p%40ss@h/db?password=qu%3Aery&sslpassword=k3y"
    message = f'bad URI "{url}"; token "p%40ss"; decoded p@ss, qu:ery and k3y'
    hidden = hide_secrets(message, url)
    for secret in ("p%40ss", "p@ss", "qu%3Aery", "qu:ery", "k3y"):
        assert secret not in hidden
    assert '"postgresql://u@h/db"' in hidden


# -- every library entry that takes a store refuses, and creates nothing ---------


@pytest.fixture
def empty_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("POLYLOOP_STORE", raising=False)
    monkeypatch.delenv("POLYLOOP_DIR", raising=False)
    yield tmp_path
    assert os.listdir(tmp_path) == [], "a folder was made for a URL"


@pytest.mark.parametrize("spec", REFUSED)
def test_open_store_refuses_another_scheme(empty_cwd, spec):
    with pytest.raises(StoreUrlError):
        open_store(spec)


@pytest.mark.parametrize("spec", ["mysql://h/db", "postgresql://u@h/db"])
def test_a_jsonl_store_is_never_given_a_url(empty_cwd, spec):
    with pytest.raises(StoreUrlError):
        JsonlStore(spec)


def test_list_runs_refuses_another_scheme(empty_cwd):
    with pytest.raises(StoreUrlError):
        list_runs("sqlite:///x.db")


def test_run_batch_refuses_another_scheme_given_or_from_the_environment(empty_cwd, monkeypatch):
    target = f"{TESTS / 'cli' / 'agents.py'}:finishing"
    with pytest.raises(StoreUrlError):
        run_batch(target, ["g"], directory="mysql://h/db", processes=1)
    monkeypatch.setenv("POLYLOOP_STORE", "mysql://h/db")
    with pytest.raises(StoreUrlError):
        run_batch(target, ["g"], processes=1)


async def test_an_agents_default_store_refuses_a_url_in_polyloop_dir(empty_cwd, monkeypatch):
    monkeypatch.setenv("POLYLOOP_DIR", "mysql://h/db")
    agent = Agent(model=ScriptedModel([{"final": "done"}]), tools=[])
    with pytest.raises(StoreUrlError):
        await agent.run("g", run_id="r1")
