"""AnthropicModel configuration: environment, keyword overrides, the optional extra."""

from __future__ import annotations

import anthropic
import pytest

from polyloop import Agent
from polyloop.anthropic import DEFAULT_BASE_URL, AnthropicModel


def test_configuration_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in [
        ("ANTHROPIC_BASE_URL", "http://127.0.0.1:4000/"),
        ("ANTHROPIC_API_KEY", "sk-ant-from-env"),
        ("ANTHROPIC_MODEL", "from-anthropic-model"),
    ]:
        monkeypatch.setenv(name, value)
    assert AnthropicModel().model == "from-anthropic-model"  # POLYLOOP_MODEL, when set, wins:
    monkeypatch.setenv("POLYLOOP_MODEL", "from-polyloop-model")
    model = AnthropicModel()
    assert (model.model, model.base_url, model._api_key) == (
        "from-polyloop-model",
        "http://127.0.0.1:4000",
        "sk-ant-from-env",
    )


def test_keywords_override_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "env-key")
    monkeypatch.setenv("POLYLOOP_MODEL", "env-model")
    model = AnthropicModel(model="kw", base_url="http://127.0.0.1:2", api_key="kw-key", max_tokens=99)
    assert (model.model, model.base_url, model._api_key, model.max_tokens) == (
        "kw",
        "http://127.0.0.1:2",
        "kw-key",
        99,
    )


def test_a_model_name_and_for_anthropics_api_a_key_are_required() -> None:
    with pytest.raises(ValueError, match="POLYLOOP_MODEL"):
        AnthropicModel(base_url="http://127.0.0.1:1")
    with pytest.raises(ValueError, match="ANTHROPIC_API_KEY"):
        AnthropicModel(model="claude-test")
    assert AnthropicModel(model="claude-test", api_key="k").base_url == DEFAULT_BASE_URL
    assert AnthropicModel(model="m", base_url="http://localhost:4000")._api_key  # a placeholder for gateways


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(TypeError):
        AnthropicModel("claude")  # type: ignore[misc]
    with pytest.raises(ValueError, match="max_tokens"):
        AnthropicModel(model="m", api_key="k", max_tokens=0)
    for field in ("system", "max_tokens", "messages"):
        with pytest.raises(ValueError, match=field):
            AnthropicModel(model="m", api_key="k", params={field: 1})


def test_describe_records_model_url_and_limits_never_the_key() -> None:
    model = AnthropicModel(
        model="m", base_url="http://user:hunter2@127.0.0.1:8000", api_key="sk-ant-secret", params={"temperature": 0}
    )
    assert model.describe() == {
        "type": "AnthropicModel",
        "model": "m",
        "base_url": "http://127.0.0.1:8000",
        "max_tokens": 4096,
        "params": {"temperature": 0},
    }
    text = repr(model.describe()) + repr(model) + repr(Agent(model=model).config())
    assert "sk-ant-secret" not in text and "hunter2" not in text


async def test_a_given_client_has_its_retries_turned_off() -> None:
    async with anthropic.AsyncAnthropic(api_key="k", base_url="http://127.0.0.1:9", max_retries=5) as client:
        model = AnthropicModel(model="m", client=client)
        assert model._client.max_retries == 0
        assert client.max_retries == 5
        assert model.describe()["base_url"] == "http://127.0.0.1:9"
