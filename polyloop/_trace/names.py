"""The names a run's trace uses: the OpenTelemetry GenAI conventions' and PolyLoop's own.

The `gen_ai.*` and `error.type` keys are the ones the
`opentelemetry-semantic-conventions` package publishes
(`opentelemetry.semconv._incubating.attributes.gen_ai_attributes`, version
0.66b2: semantic conventions 1.44.0, as docs/how-to/see-runs-in-your-tracing-tool.md
cites them); they are spelled here so that the core,
which never imports OpenTelemetry, can build spans, and
`tests/otel/test_names.py` checks each one against that package. PolyLoop's
own facts live under `polyloop.*`.
"""

from __future__ import annotations

from pathlib import PurePath

# -- the GenAI conventions' (checked against opentelemetry-semantic-conventions) ---------------
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
TOOL_NAME = "gen_ai.tool.name"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_ARGS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"
AGENT_NAME = "gen_ai.agent.name"
CONVERSATION_ID = "gen_ai.conversation.id"
OUTPUT_MESSAGES = "gen_ai.output.messages"
TOKEN_TYPE = "gen_ai.token.type"
ERROR_TYPE = "error.type"

CHAT = "chat"
EXECUTE_TOOL = "execute_tool"
INVOKE_AGENT = "invoke_agent"

M_TOKENS = "gen_ai.client.token.usage"
M_DURATION = "gen_ai.client.operation.duration"

GENAI = {
    "GEN_AI_OPERATION_NAME": OPERATION, "GEN_AI_PROVIDER_NAME": PROVIDER,
    "GEN_AI_REQUEST_MODEL": REQUEST_MODEL, "GEN_AI_RESPONSE_MODEL": RESPONSE_MODEL,
    "GEN_AI_USAGE_INPUT_TOKENS": INPUT_TOKENS, "GEN_AI_USAGE_OUTPUT_TOKENS": OUTPUT_TOKENS,
    "GEN_AI_TOOL_NAME": TOOL_NAME, "GEN_AI_TOOL_TYPE": TOOL_TYPE, "GEN_AI_TOOL_CALL_ID": TOOL_CALL_ID,
    "GEN_AI_TOOL_CALL_ARGUMENTS": TOOL_ARGS, "GEN_AI_TOOL_CALL_RESULT": TOOL_RESULT,
    "GEN_AI_AGENT_NAME": AGENT_NAME, "GEN_AI_CONVERSATION_ID": CONVERSATION_ID,
    "GEN_AI_OUTPUT_MESSAGES": OUTPUT_MESSAGES, "GEN_AI_TOKEN_TYPE": TOKEN_TYPE,
}
"""Each key above by its constant's name in `gen_ai_attributes` (what the test compares)."""

# -- PolyLoop's own ------------------------------------------------------------------------------
RUN_ID = "polyloop.run.id"
PROCESS = "polyloop.process"  # 0 for the start, n for the n-th resume
RESUMED = "polyloop.resumed"
GOAL_SHA = "polyloop.goal.sha256"
STEP = "polyloop.step"
CALL = "polyloop.call"
RESULT_ID = "polyloop.result.id"
ATTEMPT = "polyloop.attempt"
STATE = "polyloop.execution.state"  # done, not_executed, unknown
REPLAY_POLICY = "polyloop.replay.policy"
REPLAY = "polyloop.replay"  # an attempt after one whose outcome was unknown
VERDICT = "polyloop.recovery.verdict"  # reissue, replay, needs_operator
CUT = "polyloop.cut"  # the span was cut by a crash
KEY_SHA = "polyloop.idempotency_key.sha256"
GUARD = "polyloop.guard"
GUARD_PASSED = "polyloop.guard.passed"
RESOLVED_BY = "polyloop.resolution.source"
REQUEST_KIND = "polyloop.request.kind"
DECISION = "polyloop.decision"
ACCEPTED = "polyloop.accepted"
FINISH_REASON = "polyloop.run.finish_reason"
STOP_CAUSE = "polyloop.run.stop_cause"
STEPS = "polyloop.run.steps"
LEASE_EPOCH = "polyloop.lease.epoch"

EVENT_REUSED = "polyloop.reused"
EVENT_UNKNOWN = "polyloop.unknown"
EVENT_GUARD = "polyloop.guard_check"
EVENT_RESOLVED = "polyloop.resolved"
EVENT_WAITING = "polyloop.approval_requested"
EVENT_DECIDED = "polyloop.decided"
EVENT_ACCEPTED = "polyloop.accepted"

ERROR_CUT = "polyloop.unknown"  # an execution cut by a crash: its outcome is unknown
ERROR_CRASHED = "polyloop.crashed"  # a process that ended with an execution in flight
ERROR_MODEL = "polyloop.model_error"
ERROR_UNAVAILABLE = "polyloop.model_unavailable"
ERROR_TOOL = "polyloop.tool_error"
ERROR_PRECONDITION = "polyloop.precondition_failed"
ERROR_RUN = "polyloop.run_error"

M_STARTED = "polyloop.runs.started"
M_FINISHED = "polyloop.runs.finished"
M_STOPPED = "polyloop.runs.stopped"
M_RESUMES = "polyloop.resumes"
M_UNKNOWN = "polyloop.executions.unknown"
M_REPLAYS = "polyloop.replays"
M_WAITING = "polyloop.approvals.waiting"
M_WAIT_AGE = "polyloop.approvals.wait.duration"

_PROVIDERS = {"OpenAIModel": "openai", "AnthropicModel": "anthropic", "HostedModel": "openai"}


def provider_name(kind: str) -> str:
    """`gen_ai.provider.name` of a model by the `type` its `describe()` records."""
    return _PROVIDERS.get(kind) or f"polyloop.{kind.lower()}"


def agent_name(target: str | None) -> str:
    """`gen_ai.agent.name`: the recorded target without its folders (`demo:agent`), else `agent`."""
    if not target:
        return "agent"
    module, sep, name = target.rpartition(":")
    if not sep:
        return target
    stem = PurePath(module).stem if module.endswith(".py") else module.rpartition(".")[2]
    return f"{stem}:{name}"
