"""examples/idempotent_api.py: after a real crash, the replay carries the same key and charges once."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from example_helpers import Runner


def test_python_examples_idempotent_api_charges_once(python: Runner) -> None:
    done = python("idempotent_api.py", "--run-id", "pay", "--dir", "runs")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "child exit code: -9" in done.stdout
    assert "replay the safe action charge_card" in done.stdout
    assert "got 2 charge requests with 1 idempotency key and made 1 charge" in done.stdout
    assert "nothing charged again" in done.stderr


def test_through_the_cli_a_killed_charge_is_replayed_and_deduplicated(
    polyloop: Runner, workdir: Path, load_example: Callable[[str], ModuleType]
) -> None:
    example = load_example("idempotent_api")
    with example.PaymentsService() as service:
        env = {"PAYMENTS_URL": service.url}
        crashed = polyloop(
            "run", "examples/idempotent_api.py:agent", "--run-id", "order-1042", "--goal", "charge alice",
            env={**env, "PAYMENTS_DEMO_CRASH": "1"},
        )
        assert crashed.returncode == -signal.SIGKILL, crashed.stderr
        assert len(service.charges) == 1

        doc = json.loads(polyloop("inspect", "order-1042", "--json").stdout)
        assert doc["status"] == "resumable"  # a `safe` unknown needs no operator
        [unknown] = [e for e in doc["executions"] if e["state"] == "unknown"]
        assert (unknown["id"], unknown["replay"]) == ("s1-a1", "safe")

        resumed = polyloop("resume", "order-1042", env={**env, "PAYMENTS_DEMO_CRASH": "1"})
        assert resumed.returncode == 0, resumed.stderr
        assert "Charged alice 12.50" in resumed.stdout

    assert len(service.charges) == 1
    assert service.requests == [unknown["idempotency_key"]] * 2
    records = [json.loads(line) for line in (workdir / "runs" / "order-1042.jsonl").read_text().splitlines()]
    attempts = [r for r in records if r["record"] == "intent" and r["kind"] == "action"]
    assert [a["result_id"] for a in attempts] == ["s1-a1", "s1-a2"]
    done = [r for r in records if r["record"] == "step_completed" and r["step"] == 1]
    assert done[0]["observation"] == "charge ch_1: 1250 cents to alice"


def test_without_the_key_the_service_would_charge_twice(load_example: Callable[[str], ModuleType]) -> None:
    example = load_example("idempotent_api")
    service = example.PaymentsService()
    service.charge(None, "alice", 1250)
    service.charge(None, "alice", 1250)
    assert len(service.charges) == 2  # why the tool must send the key to be `safe`
