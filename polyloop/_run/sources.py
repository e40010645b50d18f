"""Tools that come from outside the agent's code (an MCP server), and a run's pass over them.

A `ToolSource` is declared among an agent's tools like a `Tool`; its tools
are listed on first need (`Agent.tools`), become ordinary `Tool`s (so the
intents, the recovery, approvals and `inspect` treat them like any other),
and whatever it holds open is released when the run stops (`run_on`).

A call whose request went out and whose answer never came (the server
died, the stream dropped, the call timed out) raises `ToolAnswerLostError`
from the tool: unlike any other exception of a tool, that is not a failure
the model reads but an unknown outcome. Its intent is durable and no result
is recorded, exactly as after a crash of the process; `run_on` walks the
log again and the planner says what comes next, by the tool's policy: a
`safe` call is replayed, a `never` call stops the run for an operator
(`NeedsOperatorError`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._log.errors import NeedsOperatorError
from .._recovery.plan import NeedsOperator, plan
from .hold import read_or_none, walk_checked
from .loop import _Run
from .tool_source import using
from .tools import ToolAnswerLostError

if TYPE_CHECKING:
    from .result import RunResult
    from .run_port import AgentPort

# Lost answers of `safe` calls one pass replays before it stops the run (resumable).
_LOST_REPLAYS = 3


async def run_on(agent: AgentPort, run: _Run) -> RunResult:
    """`run.go()` with the agent's sources held; a lost answer goes on as a crash would.

    Called under the run's hold. After `ToolAnswerLostError` the log is read
    and walked again (the lost call is then an intent without a result, its
    outcome unknown): a `never` call stops the run (`NeedsOperatorError`),
    a `safe` one is replayed, up to `_LOST_REPLAYS` times in one pass; then
    the error is raised and the run stays resumable.
    """
    lost = 0
    async with using(agent.sources):
        while True:
            try:
                return await run.go()
            except ToolAnswerLostError:
                lost += 1
                run_id = run.run_id
                records = await read_or_none(run.store, run_id)
                assert records is not None
                walker = await walk_checked(records, run_id)
                planned = plan(walker)
                if isinstance(planned, NeedsOperator):
                    raise NeedsOperatorError(run_id, planned.executions) from None
                if lost > _LOST_REPLAYS:
                    raise
                run = _Run(agent, run.store, walker, None)  # the same pass goes on: nothing of the checkpoint changed


def lost_answer(tool: str, run_id: str, result_id: str, why: Any) -> ToolAnswerLostError:
    """The error a tool raises when its request went out and its answer never came."""
    return ToolAnswerLostError(run_id, tool, result_id, str(why))
