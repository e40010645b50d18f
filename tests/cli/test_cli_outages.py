"""A model outage through real `polyloop` processes: exit 5, a run stopped resumable, resume and batch carry on."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from support import forking
from cli_helpers import Cli, console_script

pytest.importorskip("openai")

from polyloop.testing import FakeOpenAIServer, FakeResponse  # noqa: E402

TARGET = str(Path(__file__).resolve().parent / "model_agents.py") + ":openai_agent"  # max_attempts=3


def _port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _env(port: int) -> dict[str, str]:
    return {"OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1", "OPENAI_API_KEY": "sk-test", "POLYLOOP_MODEL": "fake-model"}


def test_run_exits_5_when_the_model_stays_down_and_resume_finishes_once_it_is_back(cli: Cli) -> None:
    port = _port()
    done = cli("run", TARGET, "--run-id", "o1", "--goal", "weather?", env=_env(port))
    assert done.code == 5, done
    assert "Traceback" not in done.stderr
    stop = [line for line in done.stderr.splitlines() if line.startswith("polyloop: stopped: ")]
    assert len(stop) == 1, done.stderr
    assert "was unavailable (3 calls in a row failed since" in stop[0] and "cannot connect" in stop[0]
    assert stop[0].endswith(f"polyloop resume o1 --dir {cli.runs}")
    assert cli.records("o1")[-1]["record"] == "run_stopped"

    doc = cli("inspect", "o1", "--json").json()
    assert doc["status"] == "resumable" and doc["waiting"] == []
    assert doc["reason"].startswith("stopped on an outage: the model at OpenAIModel http://127.0.0.1:")
    assert doc["stopped"]["attempts"] == 3 and doc["stopped"]["cause"] == "model_unavailable"
    listed = cli("ls", "--dir", str(cli.runs), "--json", dir=False).json()
    row = next(r for r in (listed["runs"] if isinstance(listed, dict) else listed) if r["run_id"] == "o1")
    assert row["status"] == "resumable" and row["reason"] == doc["reason"]

    again = cli("resume", "o1", env=_env(port))
    assert again.code == 5  # still down: stopped again, with a fresh budget of 3
    assert sum(r["record"] == "run_stopped" for r in cli.records("o1")) == 2
    with FakeOpenAIServer([FakeResponse.final("Sunny.")], api_key="sk-test", port=port):
        back = cli("resume", "o1", env=_env(port))
    assert back.code == 0, back
    assert "Sunny." in back.stdout
    assert cli("inspect", "o1", "--json").json()["status"] == "finished"


def test_a_run_that_waits_on_its_model_says_so_live_and_when_it_answers_again(cli: Cli) -> None:
    script = [FakeResponse.error(429, "slow down", retry_after=2), FakeResponse.final("Sunny.")]
    with FakeOpenAIServer(script, api_key="sk-test") as server:
        done = cli("run", TARGET, "--run-id", "w1", "--goal", "weather?", env=_env(server.port))
    assert done.code == 0, done
    waits = [line for line in done.stderr.splitlines() if "model unavailable, retrying in" in line]
    assert waits and waits[0].startswith("polyloop: model unavailable, retrying in "), done.stderr
    assert "rate limited (HTTP 429)" in waits[0]
    assert "answers again" in done.stderr


def test_a_permanent_error_ends_the_run_with_exit_1_naming_the_providers_error(cli: Cli) -> None:
    with FakeOpenAIServer([FakeResponse.final("never")], api_key="the-right-key") as server:
        port = server.port
        done = cli("run", TARGET, "--run-id", "p1", "--goal", "weather?", env=_env(port))
        assert len(server.chat_requests) == 1
    assert done.code == 1, done
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert "finished with an error after 0 steps: the model call of step 1 failed: authentication failed (HTTP 401)" \
        in lines[0]
    assert cli("inspect", "p1", "--json").json()["status"] == "finished"


def test_a_batch_stopped_by_an_outage_exits_5_and_a_re_run_resumes_its_runs(cli: Cli, tmp_path: Path) -> None:
    port = _port()
    goals = tmp_path / "goals.txt"
    goals.write_text("weather in Oslo?\nweather in Bergen?\nweather in Tromsø?\n")
    argv = ("batch", TARGET, str(goals), "--name", "wx", "--dir", str(cli.runs), "--processes", "1")
    done = cli(*argv, "--json", env=_env(port), dir=False)
    assert done.code == 5, done
    doc = done.json()
    assert doc["outcome"] == "unavailable" and doc["summary"]["unavailable"] == 3
    assert all(r["status"] == "unavailable" and "run the batch again" in r["reason"] for r in doc["runs"])
    human = cli(*argv, env=_env(port), dir=False)
    assert human.code == 5 and "model unavailable" in human.stdout
    with FakeOpenAIServer(responder=lambda body: FakeResponse.final("Sunny."), api_key="sk-test", port=port):
        again = cli(*argv, "--json", env=_env(port), dir=False)
    assert again.code == 0, again
    runs = again.json()["runs"]
    assert [(r["status"], r["action"]) for r in runs] == [("finished", "resumed")] * 3


def test_exit_code_5_is_documented_in_the_help_of_run_and_resume() -> None:
    import subprocess

    for command in ("run", "resume", "batch"):
        text = forking.run([*console_script(), command, "--help"], capture_output=True, text=True).stdout
        assert "5 " in text and "unavailable" in text, command
