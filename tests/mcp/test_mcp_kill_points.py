"""MCP tools under real faults: a real SDK server (stdio and streamable HTTP), real SIGKILLs, the real CLI.

Every scenario runs the agent (`mcp_agent.py`) in its own process against
`effect_server.py`, which records each effect in an fsync'd file, then
settles the run with `polyloop` as an operator would. Kill points: the server
killed before the request (while idle), as the request arrives (before its
effect), after its effect and before its answer, the answer never coming
(timeout), and the PolyLoop process killed after its intent and before the
request, and after the answer and before the result record. Each time: at most one run of
every `never` call in the effect file, and every unknown reported unknown
(exit code 3, `inspect` state `unknown`).
"""

from __future__ import annotations

import pytest

from scenario import HttpServer, Scenario

WRITE = [["write_effect", {"key": "a"}]]


def _unknown(s: Scenario, run_id: str, result_id: str) -> None:
    doc = s.inspect(run_id)
    assert doc["status"] == "needs_operator", doc
    states = {e["id"]: e["state"] for e in doc["executions"]}
    assert states[result_id] == "unknown", states


def _settles_as_unknown(s: Scenario, run_id: str, result_id: str = "s1-a1", *, script: list = WRITE) -> None:
    """Resuming the run stops again without running the call, and it is reported unknown."""
    again = s.polyloop("resume", run_id, script=script)
    assert again.returncode == 3, again.stderr
    assert "mark-resolved" in again.stderr and result_id in again.stderr
    _unknown(s, run_id, result_id)


@pytest.fixture(params=["stdio", pytest.param("http", marks=pytest.mark.slow)])
def transport(request):
    return request.param


def _scenario(tmp_path, transport: str, *, trust: bool = False):
    if transport == "stdio":
        return Scenario(tmp_path, trust=trust), None
    probe = Scenario(tmp_path, trust=trust)
    http = HttpServer(probe)
    s = Scenario(tmp_path, trust=trust, url=http.url)
    http.scenario = s
    http.start()
    return s, http


def test_server_killed_after_its_effect_before_its_answer_is_unknown_and_runs_once(tmp_path, transport):
    s, http = _scenario(tmp_path, transport)
    try:
        s.cue("die-after:write_effect")
        done = s.child("r", WRITE)
        assert done.returncode == 3, done.stderr
        assert "needs an operator" in done.stderr and "write_effect" in done.stderr
        assert len(s.effects("write_effect")) == 1
        if http is not None:
            http.start()  # an operator brings the server back; the resume still will not call again
        _settles_as_unknown(s, "r")
        assert len(s.effects("write_effect")) == 1
    finally:
        if http is not None:
            http.stop()


@pytest.mark.slow
def test_polyloop_killed_after_the_answer_before_the_result_record(tmp_path, transport):
    s, http = _scenario(tmp_path, transport)
    try:
        done = s.child("r", WRITE, kill_at="before:step_completed:1")
        assert done.returncode == -9, done.stderr
        assert len(s.effects("write_effect")) == 1
        _settles_as_unknown(s, "r")
        assert len(s.effects("write_effect")) == 1
    finally:
        if http is not None:
            http.stop()


@pytest.mark.slow
def test_a_request_that_gets_no_answer_in_time_is_unknown(tmp_path):
    s, _ = _scenario(tmp_path, "stdio")
    s.cue("hang-after:write_effect")
    done = s.child("r", WRITE, MCP_TIMEOUT="2")
    assert done.returncode == 3, done.stderr
    assert len(s.effects("write_effect")) == 1
    _settles_as_unknown(s, "r")
    assert len(s.effects("write_effect")) == 1


@pytest.mark.slow
def test_a_server_killed_before_the_request_is_started_again_and_the_call_runs_once(tmp_path):
    s, _ = _scenario(tmp_path, "stdio")
    s.cue("die-idle:read_effects")
    script = [["read_effects", {}], ["pause", {"seconds": 1.5}], ["write_effect", {"key": "a"}]]
    done = s.child("r", script)
    assert done.returncode == 0, done.stderr
    assert len(s.effects("write_effect")) == 1
    assert len(s.pids()) == 2  # the server died idle and was started again for the write


@pytest.mark.slow
@pytest.mark.parametrize("trust", [True, False], ids=["trusted", "untrusted"])
def test_an_idempotent_tool_is_replayed_only_when_its_server_is_trusted(tmp_path, trust):
    s, _ = _scenario(tmp_path, "stdio", trust=trust)
    s.cue("die-after:put_value")
    script = [["put_value", {"key": "k", "value": "v"}]]
    done = s.child("r", script)
    runs = s.effects("put_value")
    if trust:  # safe: the lost call is replayed, with the same idempotency key
        assert done.returncode == 0, done.stderr
        assert len(runs) == 2 and runs[0]["idempotency_key"] == runs[1]["idempotency_key"]
    else:  # whatever it claims, an untrusted server's tool is never
        assert done.returncode == 3, done.stderr
        assert len(runs) == 1
        _settles_as_unknown(s, "r", script=script)
        assert len(s.effects("put_value")) == 1


@pytest.mark.slow
@pytest.mark.parametrize("trust", [True, False], ids=["trusted", "untrusted"])
def test_a_read_only_tool_is_replayed_after_a_crash_only_when_trusted(tmp_path, trust):
    s, _ = _scenario(tmp_path, "stdio", trust=trust)
    script = [["read_effects", {}]]
    done = s.child("r", script, kill_at="before:step_completed:1")
    assert done.returncode == -9, done.stderr
    resumed = s.polyloop("resume", "r", script=script)
    if trust:
        assert resumed.returncode == 0, resumed.stderr
    else:
        assert resumed.returncode == 3, resumed.stderr
        _unknown(s, "r", "s1-a1")


@pytest.mark.slow
def test_a_server_whose_tools_changed_between_crash_and_resume_is_refused_until_a_person_accepts(tmp_path):
    s, _ = _scenario(tmp_path, "stdio", trust=True)
    script = [["read_effects", {}], ["write_effect", {"key": "a"}]]
    done = s.child("r", script, kill_at="before:step_completed:1")  # read_effects answered, not recorded
    assert done.returncode == -9, done.stderr
    # The server now claims write_effect is read-only: a trusted server's claim would make it `safe`.
    refused = s.polyloop("resume", "r", script=script, EFFECT_VARIANT="upgraded")
    assert refused.returncode == 4, refused.stderr
    assert "tool write_effect" in refused.stderr and "--accept-changes" in refused.stderr
    assert s.effects("write_effect") == []
    accepted = s.polyloop("resume", "r", "--accept-changes", "--reason", "server upgraded", script=script,
                          EFFECT_VARIANT="upgraded")
    assert accepted.returncode == 0, accepted.stderr
    assert len(s.effects("write_effect")) == 1


@pytest.mark.slow
def test_an_unknown_never_call_stays_never_when_its_server_later_claims_read_only(tmp_path):
    s, _ = _scenario(tmp_path, "stdio", trust=True)
    done = s.child("r", WRITE, kill_at="before:step_completed:1")
    assert done.returncode == -9, done.stderr
    again = s.polyloop("resume", "r", script=WRITE, EFFECT_VARIANT="upgraded")
    assert again.returncode == 3, again.stderr  # the intent recorded `never`: no claim replays it
    _unknown(s, "r", "s1-a1")
    assert len(s.effects("write_effect")) == 1


@pytest.mark.parametrize("who", ["server", pytest.param("polyloop", marks=pytest.mark.slow)])
def test_a_call_cut_off_before_its_effect_is_unknown_and_runs_once_when_a_person_says_it_did_not(tmp_path, who):
    # server: killed as the request arrives (the request went out; nothing ran);
    # polyloop: killed after its intent is durable, before the request is sent.
    s, _ = _scenario(tmp_path, "stdio")
    if who == "server":
        s.cue("die-before:write_effect")
        done = s.child("r", WRITE)
        assert done.returncode == 3, done.stderr
    else:
        done = s.child("r", WRITE, kill_at="after:intent:action:1")
        assert done.returncode == -9, done.stderr
    assert s.effects("write_effect") == []
    _settles_as_unknown(s, "r")
    assert s.effects("write_effect") == []
    settled = s.polyloop("mark-resolved", "r", "s1-a1", "--not-executed", "--reason", "no effect in the file")
    assert settled.returncode == 0, settled.stderr
    finished = s.polyloop("resume", "r", script=WRITE)
    assert finished.returncode == 0, finished.stderr
    assert len(s.effects("write_effect")) == 1


@pytest.mark.slow  # four processes and two servers (14 s): CI runs it by `pytest -m slow`
def test_a_tool_whose_approval_the_changed_server_no_longer_asks_is_a_change_a_person_can_accept(tmp_path):
    # approve_destructive: write_effect's calls wait for approval; after a crash the server claims it is
    # read-only, which would drop the approval. The resume refuses as for any changed tool (exit 4), and a
    # person can accept it; it was a RunMismatchError (exit 2, "resume it without overriding") no acceptance
    # passed. Accepted, the run keeps the approval it recorded: the write still waits for a person.
    s, _ = _scenario(tmp_path, "stdio", trust=True)
    script = [["read_effects", {}], ["write_effect", {"key": "a"}]]
    done = s.child("r", script, kill_at="before:step_completed:1", MCP_APPROVE="1")
    assert done.returncode == -9, done.stderr
    refused = s.polyloop("resume", "r", script=script, MCP_APPROVE="1", EFFECT_VARIANT="upgraded")
    assert refused.returncode == 4, refused.stderr
    assert "tool write_effect" in refused.stderr and "--accept-changes" in refused.stderr
    assert s.effects("write_effect") == []
    accepted = s.polyloop("resume", "r", "--accept-changes", "--reason", "server upgraded", script=script,
                          MCP_APPROVE="1", EFFECT_VARIANT="upgraded")
    assert accepted.returncode == 3 and "polyloop approve r s2-a1" in accepted.stderr, accepted.stderr
    assert s.effects("write_effect") == []
    approved = s.polyloop("approve", "r", "s2-a1", "--reason", "checked")
    assert approved.returncode == 0, approved.stderr
    finished = s.polyloop("resume", "r", script=script, MCP_APPROVE="1", EFFECT_VARIANT="upgraded")
    assert finished.returncode == 0, finished.stderr
    assert len(s.effects("write_effect")) == 1
