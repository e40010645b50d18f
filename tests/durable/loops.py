"""Two users' loops on `polyloop.durable`, the same scenario each: a hand-written loop and a Pydantic AI agent.

Step 1 asks for two calls (`lookup`, safe; `pay` 3, never), step 2 for one (`pay` 5, never),
step 3 answers. Every model call is appended to `$DURABLE_WORLD/model.jsonl` (a call paid) and
every tool run to `$DURABLE_WORLD/effects.jsonl` (the ground truth an operator settles from).
`hand_main` and `pyd_main` are the entry points `polyloop resume` calls.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from polyloop import durable
from polyloop.durable import Reply

GOAL = "pay the two bills"
TOOLS = {"lookup": "safe", "pay": "never"}
HERE = Path(__file__).resolve()


def world() -> Path:
    return Path(os.environ["DURABLE_WORLD"])


def note(name: str, entry: dict[str, Any]) -> None:
    with open(world() / name, "a") as f:
        f.write(json.dumps(entry) + "\n")
        f.flush()
        os.fsync(f.fileno())


def lookup(args: dict[str, Any]) -> str:
    note("effects.jsonl", {"tool": "lookup", "args": args})
    return f"bill {args['q']}: due"


def pay(args: dict[str, Any]) -> str:
    note("effects.jsonl", {"tool": "pay", "args": args})
    return f"paid {args['amount']}"


SCRIPT = [
    [("lookup", {"q": "gas"}), ("pay", {"amount": 3})],
    [("pay", {"amount": 5})],
    [],
]


def scripted(step: int) -> Reply:
    note("model.jsonl", {"step": step})
    calls = SCRIPT[step - 1]
    return Reply(calls=tuple(calls), text=None if calls else "done", raw={"step": step})


async def hand_main(run_id: str, store: Any, goal: str = GOAL) -> Any:
    """A hand-written loop: ask the model, run what it asks for, stop at an answer."""
    fns = {"lookup": lookup, "pay": pay}
    async with durable.open_run(run_id, store=store, goal=goal, tools=TOOLS,
                                target=f"{HERE}:hand_main", fingerprint={"model": "scripted"}) as run:
        step = 0
        while True:
            step += 1
            reply = await run.model_call(lambda: scripted(step))
            if not reply.calls:
                return await run.finish(reply.text)
            for name, args in reply.calls:
                if name == "pay" and os.environ.get("DURABLE_CHANGED"):  # the loop's logic changed since
                    args = {"amount": args["amount"] + 1}
                await run.tool_call(name, args, fns[name])


def pydantic_agent() -> Any:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    def model(messages: list[Any], info: Any) -> ModelResponse:
        step = sum(1 for m in messages if m.kind == "response") + 1
        note("model.jsonl", {"step": step})
        calls = SCRIPT[step - 1]
        if not calls:
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart(n, a, tool_call_id=f"c{step}-{k}") for k, (n, a) in enumerate(calls)])

    agent = Agent(FunctionModel(model, model_name="scripted"))

    @agent.tool_plain(metadata={"polyloop": {"replay": "safe"}})
    def lookup(q: str) -> str:  # noqa: F811
        return globals()["lookup"]({"q": q})

    @agent.tool_plain
    def pay(amount: int) -> str:  # noqa: F811
        return globals()["pay"]({"amount": amount})

    return agent


async def pyd_main(run_id: str, store: Any, goal: str = GOAL) -> Any:
    from polyloop.pydantic_ai import PolyLoopAgent

    return await PolyLoopAgent(pydantic_agent(), target=f"{HERE}:pyd_main").run(goal, run_id=run_id, store=store)


def openai_agent() -> Any:
    """The same agent on OpenAI's chat API (`OpenAIChatModel`), at `$FAKE_OPENAI_URL` (the fake server)."""
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel("fake-model", provider=OpenAIProvider(base_url=os.environ["FAKE_OPENAI_URL"], api_key="t"))
    agent = Agent(model)

    @agent.tool_plain(metadata={"polyloop": {"replay": "safe"}})
    def lookup_bill(q: str) -> str:
        return lookup({"q": q})

    @agent.tool_plain
    def pay_bill(amount: int) -> str:
        return pay({"amount": amount})

    return agent


async def openai_main(run_id: str, store: Any, goal: str = GOAL) -> Any:
    from polyloop.pydantic_ai import PolyLoopAgent

    return await PolyLoopAgent(openai_agent(), target=f"{HERE}:openai_main").run(goal, run_id=run_id, store=store)


def approval_agent() -> Any:
    """One call of a tool declared `requires_approval=True` (Pydantic AI's deferred approval)."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    def model(messages: list[Any], info: Any) -> ModelResponse:
        step = sum(1 for m in messages if m.kind == "response") + 1
        note("model.jsonl", {"step": step})
        if step == 1:
            return ModelResponse(parts=[ToolCallPart("wire", {"amount": 900}, tool_call_id="w1")])
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(model, model_name="scripted"))

    @agent.tool_plain(requires_approval=True)
    def wire(amount: int) -> str:
        note("effects.jsonl", {"tool": "wire", "args": {"amount": amount}})
        return f"wired {amount}"

    return agent


async def approval_main(run_id: str, store: Any, goal: str = GOAL) -> Any:
    from polyloop.pydantic_ai import PolyLoopAgent

    return await PolyLoopAgent(approval_agent(), target=f"{HERE}:approval_main").run(goal, run_id=run_id, store=store)
