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
