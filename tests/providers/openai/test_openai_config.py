"""OpenAIModel configuration: environment, keyword overrides, the optional extra."""

from __future__ import annotations

import subprocess
import sys

import openai
import pytest

from polyloop import Agent
from polyloop.openai import DEFAULT_BASE_URL, OpenAIModel


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_importing_polyloop_imports_no_model_sdk() -> None:
    done = _python("import sys, polyloop, polyloop.testing; print([m in sys.modules for m in ('openai', 'anthropic')])")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[False, False]"


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_a_missing_sdk_names_the_extra(sdk: str) -> None:
    # sys.modules[name] = None makes `import <sdk>` fail as if it were not installed.
    done = _python(
        f"import sys; sys.modules[{sdk!r}] = None\n"
        "try:\n"
        f"    import polyloop.{sdk}\n"
        "except ImportError as exc:\n"
        "    print(exc.name, '|', exc)\n"
    )
    assert done.returncode == 0, done.stderr
    assert f"{sdk} |" in done.stdout
    assert f"pip install 'polyloop[{sdk}]'" in done.stdout


def test_configuration_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1/")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-from-env")
    monkeypatch.setenv("OPENAI_MODEL", "from-openai-model")
    assert OpenAIModel().model == "from-openai-model"
    monkeypatch.setenv("POLYLOOP_MODEL", "from-polyloop-model")
    model = OpenAIModel()
    assert model.model == "from-polyloop-model"
    assert model.base_url == "http://127.0.0.1:11434/v1"
    assert model._api_key == "sk-secret-from-env"


def test_keywords_override_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "env-key")
    monkeypatch.setenv("POLYLOOP_MODEL", "env-model")
    model = OpenAIModel(model="kw-model", base_url="http://127.0.0.1:2/v1", api_key="kw-key")
    assert (model.model, model.base_url, model._api_key) == ("kw-model", "http://127.0.0.1:2/v1", "kw-key")


def test_keywords_only() -> None:
    with pytest.raises(TypeError):
        OpenAIModel("gpt")  # type: ignore[misc]


def test_a_model_name_is_required() -> None:
    with pytest.raises(ValueError, match="POLYLOOP_MODEL"):
        OpenAIModel(base_url="http://127.0.0.1:1/v1")


def test_openai_itself_needs_a_key() -> None:
    with pytest.raises(ValueError, match="OPENAI_API_KEY"):
        OpenAIModel(model="gpt-test")
    assert OpenAIModel(model="gpt-test", api_key="k").base_url == DEFAULT_BASE_URL


def test_a_local_server_needs_no_key() -> None:
    model = OpenAIModel(model="llama", base_url="http://localhost:8080/v1")
    assert model._api_key  # a placeholder: the openai client insists on one


def test_describe_records_model_and_url_never_the_key() -> None:
    model = OpenAIModel(
        model="m", base_url="http://user:hunter2@127.0.0.1:8000/v1", api_key="sk-very-secret"
    )
    described = model.describe()
    assert described == {"type": "OpenAIModel", "model": "m", "base_url": "http://127.0.0.1:8000/v1"}
    text = repr(described) + repr(model) + repr(Agent(model=model).config())
    assert "sk-very-secret" not in text and "hunter2" not in text


def test_params_are_recorded_and_sent() -> None:
    model = OpenAIModel(model="m", base_url="http://127.0.0.1:1/v1", params={"temperature": 0, "seed": 7})
    assert model.describe()["params"] == {"temperature": 0, "seed": 7}
    body = model.request([{"role": "user", "content": "hi"}], [])
    assert body == {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0, "seed": 7}


def test_params_cannot_override_what_the_adapter_sends() -> None:
    with pytest.raises(ValueError, match="messages"):
        OpenAIModel(model="m", base_url="http://127.0.0.1:1/v1", params={"messages": []})


@pytest.mark.asyncio
async def test_a_given_client_has_its_retries_turned_off() -> None:
    async with openai.AsyncOpenAI(api_key="k", base_url="http://127.0.0.1:9/v1", max_retries=5) as client:
        model = OpenAIModel(model="m", client=client)
        assert model._client.max_retries == 0
        assert client.max_retries == 5  # the caller's client is left as it was
        assert model.describe()["base_url"] == "http://127.0.0.1:9/v1"
