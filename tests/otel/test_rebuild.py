"""`polyloop trace RUN`: the trace rebuilt from a log alone (also one written before log format 1.4)."""

from __future__ import annotations

import json
from pathlib import Path

from polyloop._trace.spans import rebuild, trace_id_of
from polyloop.stores import JsonlStore
from tests.support.cli import clean_env, polyloop

from .receiver import otlp_receiver

AGENT = str(Path(__file__).with_name("agents.py")) + ":agent"


def _crashed_run(tmp_path: Path, kill_in: str = "send") -> str:
    runs = str(tmp_path / "runs")
    env = clean_env(POLYLOOP_TEST_KILL_IN=kill_in, POLYLOOP_TEST_MARKS=str(tmp_path))
    done = polyloop("run", AGENT, "--goal", "tell ops", "--run-id", "r", "--dir", runs, env=env)
    assert done.code == -9, done.stderr
    return runs


async def test_a_log_without_a_trace_context_still_rebuilds_under_an_id_derived_from_the_run(tmp_path: Path) -> None:
    runs = _crashed_run(tmp_path)
    lines = Path(runs, "r.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    assert "trace" not in first  # not traced: the record reads as before 1.4
    first["schema_version"] = "1.3"  # as a 1.3 writer wrote it
    Path(runs, "r.jsonl").write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    records = await JsonlStore(runs).read_log("r")
    trace = rebuild(records, "r")
    assert trace.trace_id == trace_id_of("r")
    names = [s.name for s in trace.spans]
    assert names.count("invoke_agent agents:agent") == 1
    cut = [s for s in trace.spans if s.error == "polyloop.unknown"]
    assert [s.attributes["polyloop.result.id"] for s in cut] == ["s2-a1"]
    assert cut[0].attributes["polyloop.replay.policy"] == "never"


def test_trace_json_and_tree_and_their_refusals(tmp_path: Path) -> None:
    runs = _crashed_run(tmp_path)
    done = polyloop("trace", "r", "--dir", runs, "--json")
    assert done.code == 0, done.stderr
    doc = done.json()
    assert doc["schema"] == 1 and doc["run_id"] == "r" and len(doc["trace_id"]) == 32
    spans = {s["attributes"].get("polyloop.result.id", s["name"]): s for s in doc["spans"]}
    assert spans["s2-a1"]["error_type"] == "polyloop.unknown" and spans["s2-a1"]["status"] == "error"
    assert spans["s1-a1"]["status"] == "unset" and spans["s1-a1"]["parent_span_id"] == doc["spans"][0]["span_id"]
    assert "3 open invoices" not in done.stdout  # no content unless asked for
    tree = polyloop("trace", "r", "--dir", runs)
    assert tree.code == 0 and "execute_tool send" in tree.stdout and "[polyloop.unknown]" in tree.stdout
    assert polyloop("trace", "nope", "--dir", runs).code == 2
    assert polyloop("trace", "r", "--dir", runs, "--json", "--to", "http://127.0.0.1:9").code == 2
    with otlp_receiver(status=400) as refusing:
        refused = polyloop("trace", "r", "--dir", runs, "--to", refusing.url)
    assert refused.code == 1 and "was not sent" in refused.stderr


def test_a_to_that_is_not_an_http_url_is_refused_in_one_line_before_anything_is_read(tmp_path: Path) -> None:
    runs = str(tmp_path / "runs")
    for bad in ("localhost:4318", "notaurl", "ftp://collector:4318", "", "http://", "http://[::1", "http://h:port"):
        done = polyloop("trace", "r", "--dir", runs, "--to", bad)
        assert done.code == 2, (bad, done.code, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1 and "OTLP/HTTP receiver URL" in done.stderr, done.stderr


def test_a_to_given_as_the_full_traces_url_with_a_trailing_slash_reaches_the_receiver(tmp_path: Path) -> None:
    runs = _crashed_run(tmp_path)
    with otlp_receiver() as receiver:
        done = polyloop("trace", "r", "--dir", runs, "--to", receiver.url + "/v1/traces/")
    assert done.code == 0, done.stderr
    assert len(receiver.spans) == 5  # p0, s1-m1, s1-a1, s2-m1 and s2-a1 (cut)


def test_a_log_without_records_has_no_spans_and_nothing_is_sent(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "e.jsonl").write_text('{"record": "run_started", "run_id": "e"')  # killed while writing its first
    tree = polyloop("trace", "e", "--dir", str(runs))
    assert tree.code == 0 and tree.stdout == "no trace of run e: its log has no records\n", tree
    doc = polyloop("trace", "e", "--dir", str(runs), "--json")
    assert doc.code == 0 and doc.json() == {"schema": 1, "run_id": "e", "trace_id": None, "spans": []}
    with otlp_receiver() as receiver:
        sent = polyloop("trace", "e", "--dir", str(runs), "--to", receiver.url)
    assert sent.code == 0 and "nothing sent" in sent.stderr and "Error" not in sent.stderr, sent.stderr
    assert receiver.spans == []


def test_a_recorded_trace_context_that_is_no_traceparent_is_ignored_and_the_traced_resume_still_runs(
        tmp_path: Path) -> None:
    runs = _crashed_run(tmp_path, kill_in="fetch")  # a safe action cut: the resume replays it
    log = Path(runs, "r.jsonl")
    lines = log.read_text().splitlines()
    first = json.loads(lines[0])
    first["trace"] = "00-" + "z" * 32 + "-" + "y" * 16 + "-01"  # hand-edited, or another tool's
    log.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    with otlp_receiver() as live:
        done = polyloop("resume", "r", "--dir", runs, "--otel",
                        env=clean_env(OTEL_EXPORTER_OTLP_ENDPOINT=live.url, OTEL_METRICS_EXPORTER="none"))
        assert done.code == 0, done.stderr
    assert live.spans and {s.trace_id for s in live.spans} == {trace_id_of("r")}
    with otlp_receiver() as again:
        sent = polyloop("trace", "r", "--dir", runs, "--to", again.url)
    assert sent.code == 0, sent.stderr
    assert {s.span_id for s in live.spans} <= {s.span_id for s in again.spans}


def test_only_a_w3c_traceparent_is_taken_as_one() -> None:
    from polyloop._trace.spans import parse_traceparent

    tid, sid = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    assert parse_traceparent(f"00-{tid}-{sid}-01") == (tid, sid)
    for bad in (f"00-{tid.upper()}-{sid}-01", f"00-{'0' * 32}-{sid}-01", f"00-{tid}-{'0' * 16}-01",
                f"ff-{tid}-{sid}-01", f"00-{'g' * 32}-{sid}-01", f"00-{tid}-{sid}-zz", "", "00-1-2-01"):
        assert parse_traceparent(bad) is None, bad
