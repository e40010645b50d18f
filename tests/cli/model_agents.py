"""Agents on a hosted-model adapter for the CLI tests (targets `model_agents.py:NAME`).

The adapter reads its server from the environment (`OPENAI_BASE_URL`), which
the test points at a fake server on 127.0.0.1.
"""

from __future__ import annotations

from polyloop import Agent, tool


@tool(replay="safe")
def lookup(city: str) -> str:
    """Look up the weather in a city."""
    return f"{city}: sunny"


def openai_agent() -> Agent:
    from polyloop.openai import OpenAIModel

    return Agent(model=OpenAIModel(timeout=5), tools=[lookup], max_attempts=3, retry_backoff=0.01)
