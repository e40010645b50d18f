"""The storage contract, run over a user's loop (`polyloop.durable`) instead of the built-in one.

The same scenario as `resume_matches_uninterrupted_run` and
`unknown_actions_follow_their_replay_policy`, written as a hand-written loop:
its log is the built-in loop's record for record (but `run_started`), a run
of it stopped after each step and resumed writes the same logical log as one
never stopped, and its unknown calls follow their replay policies.
"""

from __future__ import annotations

import uuid
from typing import Any

from .. import durable
from .._log.errors import NeedsOperatorError
from .._operate.resolve import mark_resolved
from ._samples import ContractViolation, CrashIn, StopAfter, Stopped, contract_agent, logical, make_store

SCRIPT: list[list[tuple[str, dict[str, Any]]]] = [
    [("read", {"name": "a"})], [("write", {"name": "b"})], [("read", {"name": "c"})], [("write", {"name": "d"})], [],
]


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise ContractViolation(message)


async def users_loop(store: Any, run_id: str, effects: list[str], *, crash_on: str | None = None,
                     policies: dict[str, str] | None = None) -> Any:
    """The contract agent's work as a hand-written loop on `polyloop.durable` (`write` never, `read` safe)."""

    def read(args: dict[str, Any]) -> str:
        if crash_on == f"read {args['name']}":
            raise CrashIn
        return f"read {args['name']}"

    def write(args: dict[str, Any]) -> str:
        effects.append(args["name"])
        if crash_on == f"write {args['name']}":
            raise CrashIn
        return f"wrote {args['name']}"

    fns = {"read": read, "write": write}
    async with durable.open_run(run_id, store=store, goal="contract", max_steps=10,
                                tools=policies or {"read": "safe", "write": "never"}) as run:
        step = 0
        while True:
            step += 1
            reply = await run.model_call(lambda: durable.Reply(calls=tuple(SCRIPT[step - 1]),
                                                               text=None if SCRIPT[step - 1] else "all done"))
            if not reply.calls:
                return await run.finish(reply.text)
            for name, args in reply.calls:
                await run.tool_call(name, args, fns[name])


def _comparable(records: list[Any]) -> list[dict[str, Any]]:
    out = logical([r for r in records if r.TAG not in ("run_started", "resumed")])
    for entry in out:
        if entry.get("idempotency_key"):
            entry["idempotency_key"] = "k"
    return out


async def a_users_loop_writes_the_built_in_loops_log_and_resumes_the_same(factory: Any) -> None:
    """A user's loop writes the built-in loop's records; stopped after step N and resumed, the same log."""
    store = await make_store(factory)
    builtin = f"contract-agent-{uuid.uuid4().hex[:10]}"
    await contract_agent([]).run("contract", run_id=builtin, store=store)
    expected = _comparable(list(await store.read_log(builtin)))
    whole = f"contract-loop-{uuid.uuid4().hex[:10]}"
    effects: list[str] = []
    await users_loop(store, whole, effects)
    _expect(_comparable(list(await store.read_log(whole))) == expected,
            "a user's loop wrote another log than the built-in loop for the same work")
    for stop in range(1, 5):
        run_id = f"contract-loop-stop{stop}-{uuid.uuid4().hex[:10]}"
        done: list[str] = []
        try:
            await users_loop(StopAfter(store, stop), run_id, done)
        except Stopped:
            pass
        result = await users_loop(store, run_id, done)
        _expect((result.text, result.steps) == ("all done", 5), f"stopped after step {stop}: resumed to {result}")
        _expect(done == ["b", "d"], f"stopped after step {stop}: the never tool ran {done}")
        _expect(_comparable(list(await store.read_log(run_id))) == expected,
                f"stopped after step {stop}: the resumed log differs from an uninterrupted one")


async def a_users_loop_follows_replay_policies(factory: Any) -> None:
    """In a user's loop an unknown `never` call stops for an operator; after `not_executed` it runs again."""
    store = await make_store(factory)
    run_id = f"contract-loop-never-{uuid.uuid4().hex[:10]}"
    effects: list[str] = []
    try:
        await users_loop(store, run_id, effects, crash_on="write b")
    except CrashIn:
        pass
    try:
        await users_loop(store, run_id, effects)
    except NeedsOperatorError as exc:
        _expect([e.result_id for e in exc.executions] == ["s2-a1"], "the unknown call must be listed")
    else:
        _expect(False, "a user's loop went past an unknown `never` call")
    _expect(effects == ["b"], "an unknown `never` call was repeated without an operator")
    await mark_resolved(store, run_id, "s2-a1", executed=False, reason="contract")
    result = await users_loop(store, run_id, effects)
    _expect(result.text == "all done" and effects == ["b", "b", "d"], f"after not_executed: {effects}")
