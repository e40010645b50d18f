"""A synchronous user's loop (`polyloop.durable.open_run_sync`) on PostgreSQL, resumed by `polyloop resume`."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from support.cli import clean_env, polyloop_in_process

from polyloop import durable
from polyloop.stores import PostgresStore

ENTRY = '''
from polyloop import durable
from polyloop.durable import Reply

PAID = []


def main(run_id, store, goal="g"):
    with durable.open_run_sync(run_id, store=store, goal=goal, target=__file__ + ":main",
                               tools={"look": "safe"}) as run:
        step = 0
        while True:
            step += 1
            reply = run.model_call(lambda: Reply(calls=(("look", {"n": 1}),)) if step == 1 else Reply(text="done"))
            if not reply.calls:
                return run.finish(reply.text)
            for name, args in reply.calls:
                run.tool_call(name, args, lambda a: PAID.append(a) or "looked")
'''


class Crash(BaseException):
    pass


def test_polyloop_resume_runs_a_synchronous_loop_on_the_store_it_opened(pg_url: str, tmp_path: Path) -> None:
    entry = tmp_path / "entry.py"
    entry.write_text(ENTRY)

    async def crash() -> None:  # the loop's first model call is recorded, then the process "dies"
        async with PostgresStore(pg_url) as store:
            async with durable.open_run("sync-loop", store=store, goal="g", target=f"{entry}:main",
                                        tools={"look": "safe"}) as run:
                await run.model_call(lambda: durable.Reply(calls=(("look", {"n": 1}),)))
                raise Crash

    with pytest.raises(Crash):
        asyncio.run(crash())
    # resume's PostgresStore serves resume's event loop: the loop's open_run_sync must write there.
    done = polyloop_in_process("resume", "sync-loop", "--store", pg_url, env=clean_env())
    assert done.code == 0, done.stderr
    assert "finished: final answer after 2 steps" in done.stdout
