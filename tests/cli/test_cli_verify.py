"""`polyloop verify`: every log under a directory, for CI."""

from __future__ import annotations

import shutil

from cli_helpers import one_line_error, renamed, target, tree_digest


def _logs(cli, tmp_path):
    cli("run", target("finishing"), "--goal", "g", "--run-id", "good")
    runs = cli.runs
    torn = runs / "torn.jsonl"
    torn.write_bytes(renamed((runs / "good.jsonl").read_bytes(), "good", "torn") + b'{"record":"in')
    return runs


def test_ok_and_torn_tails_pass_corruption_fails(cli, tmp_path):
    runs = _logs(cli, tmp_path)
    done = cli("verify", str(runs))
    assert done.code == 0, done
    assert "torn_tail" in done.stdout and "1 torn tail" in done.stdout
    assert cli("verify", str(runs), "--strict").code == 1

    nested = runs / "sub"
    nested.mkdir()
    (nested / "broken.jsonl").write_bytes(renamed((runs / "good.jsonl").read_bytes(), "good", "broken").replace(b"s1-a1", b"s9-a9", 1))
    done = cli("verify", str(runs))
    assert done.code == 1
    assert "broken.jsonl" in done.stdout and "line" in done.stdout


def test_json_shape(cli, tmp_path):
    runs = _logs(cli, tmp_path)
    (runs / "mid.jsonl").write_text('{"record":"run_started","run_id":"mid","goal":"g","schema_version":"1.0","at":"t"}\nnot json\n{"record":"run_finished","reason":"error","result":null,"steps":0,"at":"t"}\n')
    before = tree_digest(runs)
    done = cli("verify", str(runs), "--json")
    assert done.code == 1 and done.stderr == ""
    doc = done.json()
    assert set(doc) == {"schema", "files", "summary"}
    assert doc["summary"] == {"ok": 1, "torn_tail": 1, "corrupt": 1, "bad_product": 0}
    by_id = {f["run_id"]: f for f in doc["files"]}
    for f in doc["files"]:
        assert set(f) == {"path", "run_id", "status", "problems", "products"}
        for p in f["problems"]:
            assert set(p) == {"line", "message", "rule"}
    assert by_id["good"]["status"] == "ok" and by_id["good"]["problems"] == []
    assert by_id["torn"]["status"] == "torn_tail" and by_id["torn"]["problems"][0]["line"] == 10
    # The garbage line itself, once (not the line after it).
    assert by_id["mid"]["status"] == "corrupt" and [p["line"] for p in by_id["mid"]["problems"]] == [2]
    assert by_id["mid"]["problems"][0]["rule"] is None  # not a record at all: no invariant to name
    assert tree_digest(runs) == before  # verify never writes


def test_a_broken_invariant_is_named_by_its_number_in_json_and_text(cli, tmp_path):
    runs = _logs(cli, tmp_path)
    good = (runs / "good.jsonl").read_bytes()
    first = good.splitlines(keepends=True)[0]
    (runs / "twice.jsonl").write_bytes(renamed(good, "good", "twice")
                                       + first.replace(b'"run_id":"good"', b'"run_id":"twice"'))
    doc = cli("verify", str(runs), "--json").json()
    [twice] = [f for f in doc["files"] if f["run_id"] == "twice"]
    [problem] = twice["problems"]
    assert problem["rule"] == 2 and problem["message"] == "run_started after run_finished", problem
    text = cli("verify", str(runs))
    assert "run_started after run_finished (rule 2)" in text.stdout
    shown = cli("inspect", "twice", "--dir", str(runs))
    assert "run_started after run_finished (rule 2)" in shown.stdout + shown.stderr


def test_thousands_of_logs_use_worker_processes(cli, tmp_path):
    runs = _logs(cli, tmp_path)
    good = (runs / "good.jsonl").read_bytes()
    many = tmp_path / "many"
    many.mkdir()
    for i in range(300):
        (many / f"r{i}.jsonl").write_bytes(renamed(good, "good", f"r{i}"))
    shutil.copy(runs / "torn.jsonl", many / "torn.jsonl")
    done = cli("verify", str(many), "--json", "--workers", "2")
    assert done.code == 0, done
    assert done.json()["summary"] == {"ok": 300, "torn_tail": 1, "corrupt": 0, "bad_product": 0}


def test_no_progress_bar_when_stderr_is_not_a_terminal(cli, tmp_path):
    runs = _logs(cli, tmp_path)
    assert cli("verify", str(runs)).stderr == ""


def test_an_empty_directory_passes(cli, tmp_path):
    (tmp_path / "empty").mkdir()
    done = cli("verify", str(tmp_path / "empty"))
    assert done.code == 0 and "0 logs" in done.stdout


def test_a_missing_directory_is_bad_input(cli, tmp_path):
    done = cli("verify", str(tmp_path / "nowhere"))
    assert done.code == 2
    assert "nowhere" in one_line_error(done)
    done = cli("verify", str(tmp_path / "nowhere"), "--json")
    assert done.code == 2
    assert done.json()["error"]["exit_code"] == 2


def test_without_a_directory_it_checks_where_every_command_looks(cli, tmp_path):
    """No DIR: --dir, else $POLYLOOP_STORE, else $POLYLOOP_DIR, else ./runs (as `ls` or `inspect`)."""
    runs = _logs(cli, tmp_path)
    assert runs.name == "runs" and runs.parent == cli.cwd
    done = cli("verify", dir=False)  # ./runs
    assert done.code == 0 and "2 logs checked" in done.stdout, done
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(runs, elsewhere)
    (elsewhere / "torn.jsonl").unlink()
    for args, env in [(["--dir", str(elsewhere)], {}), ([], {"POLYLOOP_DIR": str(elsewhere)}),
                      ([], {"POLYLOOP_STORE": str(elsewhere)})]:
        done = cli("verify", *args, env=env, dir=False)
        assert done.code == 0 and "1 log checked" in done.stdout, (args, env, done)
    done = cli("verify", str(runs), "--dir", str(elsewhere), dir=False)
    assert done.code == 2 and "one of DIR, --dir and --store" in one_line_error(done)
