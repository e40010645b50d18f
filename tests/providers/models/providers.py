"""The two hosted-model adapters side by side, for tests that hold for both (`providers.py`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from polyloop.anthropic import AnthropicModel
from polyloop.openai import OpenAIModel
from polyloop.testing import FakeAnthropicServer, FakeOpenAIServer, FakeResponse

KEY = "test-key"
HISTORY = [{"role": "user", "content": "weather in Oslo?"}]
SPECS = [{"name": "lookup", "description": "Look up a city.", "parameters": {"type": "object"}}]


@dataclass(frozen=True)
class Provider:
    """One adapter with its fake server and an answer that sets every field the adapter reads."""

    name: str
    server: Any
    model: Any
    full: FakeResponse

    def adapter(self, server: Any, *, timeout: float = 10.0) -> Any:
        return self.model(model="fake-model", base_url=server.base_url, api_key=KEY, timeout=timeout)

    def __str__(self) -> str:
        return self.name


OPENAI = Provider(
    "openai",
    FakeOpenAIServer,
    OpenAIModel,
    FakeResponse.tool_call("lookup", {"city": "Oslo"}, text="Checking.", usage=(10, 2)),
)
ANTHROPIC = Provider(
    "anthropic",
    FakeAnthropicServer,
    AnthropicModel,
    # content[0] is the text block, content[1] the tool_use block
    FakeResponse(text="Checking.", tool_calls=(("lookup", {"city": "Oslo"}),), usage=(10, 2), cache=(3, 4)),
)
PROVIDERS = [OPENAI, ANTHROPIC]


def client_connections(port: int) -> int:
    """Established TCP connections to 127.0.0.1:`port` from a client (Linux's /proc/net/tcp)."""
    count = 0
    for row in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        remote, state = row.split()[2:4]
        if state == "01" and int(remote.split(":")[1], 16) == port:
            count += 1
    return count
