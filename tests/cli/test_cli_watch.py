"""`polyloop watch`: a live run followed in a pipe and in a pseudo-terminal, and how a watch ends."""

from __future__ import annotations

import json
import signal

from cli_helpers import Done, console_script, one_line_error, target
from watch_helpers import Lines, Screen, ended, open_gate, polyloop, start_gated, terminal_env


def test_a_pipe_gets_each_step_as_it_lands_before_the_run_ends(cli, tmp_path):
    gate = tmp_path / "gate"
    where = ["--dir", str(cli.runs)]
    watch = polyloop("watch", "gated", "--wait", *where, cwd=tmp_path)
    lines = Lines(watch.stdout)
    with ended(watch, lines):
        assert "waiting for the run to start" in lines.until("waiting")
        with ended(start_gated("gated", where, gate, tmp_path)) as run:
            assert "goal 'pass the gates'" in lines.until("started")
            for step in (1, 2, 3):
                in_flight = lines.until(f"s{step}-a1 gated")
                assert f"step {step}" in in_flight and "in flight [safe]" in in_flight
                assert run.poll() is None  # seen while the run waits at its gate
                open_gate(gate, step)
                done = lines.until("completed")
                assert f"s{step}-a1 done: 'gate {step} opened'" in done
            assert "final_answer after 4 steps" in lines.until("finished")
            assert "run gated finished: final_answer" in lines.until("run gated")
            assert run.wait(timeout=60) == 0
        assert watch.wait(timeout=60) == 0, watch.stderr.read()
    assert "held by pid" in "\n".join(lines.seen)


def test_a_terminal_gets_a_live_view_redrawn_in_place(cli, tmp_path):
    gate = tmp_path / "gate"
    where = ["--dir", str(cli.runs)]
    with ended(start_gated("live", where, gate, tmp_path)) as run:
        screen = Screen([*console_script(), "watch", "live", "--wait", *where], tmp_path, terminal_env())
        screen.until("watching")
        screen.until("held by pid")
        screen.until("now")  # what is in flight right now: the gated tool of step 1
        assert "s1-a1" in screen.plain
        for step in (1, 2, 3):
            open_gate(gate, step)
        assert screen.wait() == 0
        assert run.wait(timeout=60) == 0
    assert "\x1b[1m" in screen.text  # a terminal: styled
    assert "\x1b[1A" in screen.text  # and redrawn in place (the cursor moves up over the last view)
    assert "run live finished: final_answer" in screen.plain


def test_a_finished_run_is_shown_and_the_watch_ends_at_once(cli):
    assert cli("run", target("finishing"), "--goal", "g", "--run-id", "done").code == 0
    done = cli("watch", "done", "--dir", str(cli.runs))
    assert done.code == 0, done
    assert done.stdout.splitlines()[-1].startswith("run done finished: final_answer")
    assert "s1-a1 read_note" in done.stdout


def test_a_run_stopped_for_a_person_ends_the_watch_with_3_and_the_commands(cli, crashed_mailer):
    crashed_mailer("mail")
    done = cli("watch", "mail", "--dir", str(cli.runs))
    assert done.code == 3, done
    assert "s1-a1 send_email" in done.stdout and "in flight [never]" in done.stdout
    assert "run mail needs_operator" in done.stdout
    assert f"polyloop mark-resolved mail s1-a1 --executed --reason TEXT --dir {cli.runs}" in done.stdout


def test_a_run_that_ended_in_an_error_exits_1(cli):
    cli("run", target("model_error"), "--goal", "g", "--run-id", "err")
    done = cli("watch", "err", "--dir", str(cli.runs))
    assert done.code == 1, done
    assert "model call failed" in done.stdout and "run err finished: error" in done.stdout


def test_an_unknown_run_is_refused_with_2_unless_waited_for(cli):
    done = cli("watch", "nobody", "--dir", str(cli.runs))
    assert done.code == 2
    assert "no run 'nobody'" in one_line_error(done) and "--wait" in one_line_error(done)
    done = cli("watch", "../x", "--dir", str(cli.runs))
    assert done.code == 2 and "Traceback" not in done.stderr


def test_ctrl_c_ends_a_watch_with_130(cli, tmp_path):
    watch = polyloop("watch", "later", "--wait", "--dir", str(cli.runs), cwd=tmp_path)
    lines = Lines(watch.stdout)
    with ended(watch, lines):
        lines.until("waiting")
        watch.send_signal(signal.SIGINT)
        stderr = watch.stderr.read()
        assert watch.wait(timeout=30) == 130
    done = Done(130, "", stderr)
    assert "interrupted" in one_line_error(done)


def test_json_lines_one_document_per_event_then_the_end(cli):
    cli("run", target("finishing"), "--goal", "g", "--run-id", "js")
    done = cli("watch", "js", "--json", "--dir", str(cli.runs))
    assert done.code == 0, done
    docs = [json.loads(line) for line in done.stdout.splitlines()]
    assert all(d["schema"] == 1 for d in docs)
    records = [d for d in docs if d["event"] == "record"]
    assert [d["index"] for d in records] == list(range(len(records)))
    assert records[0]["record"]["record"] == "run_started" and records[0]["backlog"] is True
    assert docs[-1]["event"] == "end" and docs[-1]["code"] == 0
    assert docs[-1]["report"]["status"] == "finished"
    intent = next(d for d in records if d["record"]["record"] == "intent" and d["record"]["kind"] == "action")
    assert intent["in_flight"] == ["s1-a1"]


def test_inspect_follow_is_watch(cli):
    cli("run", target("finishing"), "--goal", "g", "--run-id", "f")
    done = cli("inspect", "f", "--follow")
    assert done.code == 0, done
    assert done.stdout.splitlines()[-1].startswith("run f finished: final_answer")


def test_ctrl_c_in_a_terminal_ends_the_view_not_the_run(cli, tmp_path):
    gate = tmp_path / "gate"
    where = ["--dir", str(cli.runs)]
    with ended(start_gated("kept", where, gate, tmp_path)) as run:
        screen = Screen([*console_script(), "watch", "kept", "--wait", *where], tmp_path, terminal_env())
        screen.until("now")
        screen.proc.send_signal(signal.SIGINT)
        assert screen.wait() == 130
        assert screen.plain.rstrip().endswith("interrupted") and "Traceback" not in screen.plain
        assert screen.text.rfind("\x1b[?25h") > screen.text.rfind("\x1b[?25l")  # the view gave the cursor back
        assert run.poll() is None  # the run goes on
        for step in (1, 2, 3):
            open_gate(gate, step)
        assert run.wait(timeout=60) == 0
