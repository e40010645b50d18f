"""The GenAI keys the core spells are the conventions' own (opentelemetry-semantic-conventions)."""

from __future__ import annotations

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics
from opentelemetry.semconv.attributes import error_attributes

from polyloop._trace import names as N


def test_every_gen_ai_key_is_the_conventions_own() -> None:
    for constant, key in N.GENAI.items():
        assert getattr(gen_ai_attributes, constant) == key
    assert N.ERROR_TYPE == error_attributes.ERROR_TYPE
    assert N.M_TOKENS == gen_ai_metrics.GEN_AI_CLIENT_TOKEN_USAGE
    assert N.M_DURATION == gen_ai_metrics.GEN_AI_CLIENT_OPERATION_DURATION
    ops = {v.value for v in gen_ai_attributes.GenAiOperationNameValues}
    assert {N.CHAT, N.EXECUTE_TOOL, N.INVOKE_AGENT} <= ops
    providers = {v.value for v in gen_ai_attributes.GenAiProviderNameValues}
    assert {N.provider_name("OpenAIModel"), N.provider_name("AnthropicModel")} <= providers


def test_agent_names_drop_folders() -> None:
    assert N.agent_name("examples/demo.py:agent") == "demo:agent"
    assert N.agent_name("polyloop.examples.demo:agent") == "demo:agent"
    assert N.agent_name(None) == "agent"


def test_the_code_and_the_how_to_cite_the_same_version_of_the_conventions() -> None:
    import re
    from pathlib import Path

    how_to = (Path(__file__).resolve().parents[2] / "docs/how-to/see-runs-in-your-tracing-tool.md").read_text()
    cited = re.search(r"package, (\S+), which\s+publishes semantic conventions (\d+\.\d+\.\d+)", how_to)
    assert cited is not None
    package, conventions = cited.groups()
    assert f"version\n{package}: semantic conventions {conventions}" in N.__doc__
