"""An agent on the OpenAI-compatible adapter for the batch outage test (`outage_agents.py:agent`).

Its server comes from `OPENAI_BASE_URL`; the budget and backoff are small
and generous: 30 failures in a row, backoff ceilings from 50 ms up to 250 ms.
"""

from __future__ import annotations

from polyloop import Agent


def agent() -> Agent:
    from polyloop.openai import OpenAIModel

    return Agent(model=OpenAIModel(timeout=5), max_attempts=30, retry_backoff=0.05, retry_max_delay=0.25)
