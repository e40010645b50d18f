"""A password in a `--store` URL never reaches the output: not a header, a JSON document or a command to paste."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from test_pg_ls import polyloop

DEMO = str(Path(__file__).resolve().parents[2] / "examples" / "demo.py") + ":agent"
SECRET = "s3cretPW"


def _with_password(url: str) -> str:
    parts = urlsplit(url)
    user, _, host = parts.netloc.rpartition("@")
    user = user.partition(":")[0] or "postgres"
    return urlunsplit(parts._replace(netloc=f"{user}:{SECRET}@{host}"))


def test_a_password_in_the_store_url_is_never_printed(own_db, tmp_path):
    url = _with_password(own_db)  # the test server trusts loopback: the password is carried, not checked
    crashed = polyloop("run", DEMO, "--run-id", "pw", "--goal", "g", "--store", url, cwd=tmp_path,
                       env={"POLYLOOP_DEMO_CRASH": "1"})
    assert crashed.code == -9, crashed  # the demo's write_file kills its process once the file is written
    inspected = polyloop("inspect", "pw", "--store", url, cwd=tmp_path)
    as_json = polyloop("inspect", "pw", "--store", url, "--json", cwd=tmp_path)
    resumed = polyloop("resume", "pw", "--store", url, cwd=tmp_path)
    assert resumed.code == 3 and as_json.json()["status"] == "needs_operator", resumed
    goals = tmp_path / "goals.txt"
    goals.write_text("write up the notes\n")
    batch = polyloop("batch", DEMO, str(goals), "--store", url, "--json", "--processes", "1", cwd=tmp_path,
                     timeout=120)
    assert batch.code == 0, batch
    for done in (crashed, inspected, as_json, resumed, batch):
        assert SECRET not in done.stdout + done.stderr, done
    # The commands to paste still name the store, less its password.
    assert "--store 'postgresql://postgres@" in inspected.stdout, inspected.stdout
    assert json.loads(batch.stdout)["directory"].startswith("postgresql://postgres@")
