"""ArtifactFiles through the CLI: resume refuses an altered or missing product (exit 4), inspect and verify list them."""

from __future__ import annotations

import hashlib
from pathlib import Path

from cli_helpers import Cli, HERE, logs_digest, one_line_error

TARGET = f"{HERE / 'artifact_agents.py'}:pipeline"


def crashed(cli: Cli, run_id: str) -> Path:
    """A run killed at its third model call: both products written and referenced."""
    done = cli("run", TARGET, "--goal", "g", "--run-id", run_id, env={"POLYLOOP_TEST_DIE_AT_CALL": "3"})
    assert done.code == -9, done
    return cli.runs / f"{run_id}.artifacts"


def test_a_flipped_byte_refuses_the_resume_with_exit_4_naming_the_product(cli: Cli):
    folder = crashed(cli, "p1")
    product = folder / "extract.json"
    original = product.read_bytes()
    product.write_bytes(bytes([original[0] ^ 0x01]) + original[1:])
    before = logs_digest(cli.runs)
    done = cli("resume", "p1")
    assert done.code == 4, done
    line = one_line_error(done)
    assert "'extract.json'" in line and "p1.artifacts/extract.json" in line and "altered" in line
    assert "new run id" in line and "--accept-changes" in line
    assert logs_digest(cli.runs) == before  # nothing written, nothing ran

    report = cli("inspect", "p1", "--json").json()
    arts = {a["name"]: a for a in report["artifacts"]}
    assert arts["extract.json"]["ok"] is False and arts["extract.json"]["state"] == "altered"
    assert arts["extract.json"]["sha256"] == hashlib.sha256(original).hexdigest()
    assert arts["summary.txt"]["ok"] is True
    assert report["status"] == "resumable" and "extract.json" in report["next"]
    text = cli("inspect", "p1")
    assert text.code == 0 and "products" in text.stdout and "altered" in text.stdout

    verified = cli("verify", str(cli.runs), "--json")
    assert verified.code == 1
    doc = verified.json()
    assert doc["summary"]["bad_product"] == 1
    assert doc["files"][0]["status"] == "bad_product"
    assert "extract.json" in doc["files"][0]["problems"][0]["message"]
    human = cli("verify", str(cli.runs))
    assert human.code == 1 and "bad_product" in human.stdout

    product.write_bytes(original)  # the recorded bytes back: the run goes on
    done = cli("resume", "p1")
    assert done.code == 0, done
    assert cli("verify", str(cli.runs), "--json").json()["summary"] == {
        "ok": 1, "torn_tail": 0, "corrupt": 0, "bad_product": 0
    }


def test_a_missing_product_refuses_the_resume_with_exit_4(cli: Cli):
    folder = crashed(cli, "p2")
    (folder / "summary.txt").unlink()
    done = cli("resume", "p2")
    assert done.code == 4
    assert "'summary.txt' (p2.artifacts/summary.txt) is missing" in one_line_error(done)


def test_a_product_named_like_a_log_is_not_verified_as_one(cli: Cli):
    crashed(cli, "p3")
    (cli.runs / "p3.artifacts" / "x.jsonl").write_text("not a log\n")
    doc = cli("verify", str(cli.runs), "--json").json()
    assert [f["run_id"] for f in doc["files"]] == ["p3"]
