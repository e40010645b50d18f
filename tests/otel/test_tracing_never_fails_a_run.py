"""Tracing never fails a run: an error of the tracer or an exporter stops the tracing of that run only."""

from __future__ import annotations

import logging
from typing import Any

from opentelemetry.sdk.trace import TracerProvider

from polyloop import Agent, RunFinished, ScriptedModel, tool
from polyloop.otel import instrument
from polyloop.testing import MemoryStore


class _Breaking:
    """A tracer provider whose tracer raises from its `after`-th span on (an exporter gone wrong)."""

    def __init__(self, after: int) -> None:
        self.inner = TracerProvider()
        self.after = after
        self.started = 0

    def get_tracer(self, *args: Any, **kwargs: Any) -> Any:
        provider, tracer = self, self.inner.get_tracer(*args, **kwargs)

        class Tracer:
            def start_span(self, name: str, *a: Any, **k: Any) -> Any:
                provider.started += 1
                if provider.started >= provider.after:
                    raise RuntimeError("the exporter's queue exploded")
                return tracer.start_span(name, *a, **k)

        return Tracer()


def _agent() -> Agent:
    @tool
    async def send(to: str) -> str:
        """Send a note."""
        return f"sent to {to}"

    return Agent(model=ScriptedModel([{"tool": "send", "args": {"to": "ops"}}, {"final": "done"}]), tools=[send])


async def test_a_tracer_that_raises_midway_leaves_the_run_whole_and_untraced_from_there(caplog) -> None:
    for after in (1, 2, 3):  # the run's own span, its first chat span, a later one
        inner = MemoryStore()
        store = instrument(inner, tracer_provider=_Breaking(after))
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="polyloop.otel"):
            result = await _agent().run("tell ops", run_id=f"r{after}", store=store)
        assert (result.reason, result.text) == ("final_answer", "done")
        records = list(await inner.read_log(f"r{after}"))
        assert isinstance(records[-1], RunFinished)
        warned = [r.getMessage() for r in caplog.records if "tracing of run" in r.getMessage()]
        assert warned == [f"polyloop: tracing of run r{after} stopped (RuntimeError: the exporter's queue "
                          "exploded); the run goes on untraced"]


async def test_an_untraced_run_after_a_failure_does_not_stop_other_runs_being_traced() -> None:
    provider = _Breaking(after=10**6)
    store = instrument(MemoryStore(), tracer_provider=provider)
    provider.after = 1
    await _agent().run("tell ops", run_id="broken", store=store)
    provider.after, provider.started = 10**6, 0
    await _agent().run("tell ops", run_id="fine", store=store)
    assert provider.started > 0  # the second run was traced again
