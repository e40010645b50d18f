"""What the run loop's helpers may use of a run and of its agent: two small declared Protocols.

The guard, approval, resume and product code (`guards`, `decisions`,
`resume`, `artifacts`) act on a run the loop (`polyloop._run.loop._Run`)
is carrying out, and the loop acts on an `Agent`; each side is typed
against these Protocols instead of importing the other, so the imports
go one way: agent -> loop -> these helpers -> this module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .._log.model_port import Model, _History
    from .._log.records import Record
    from .._log.store_port import Store
    from .._recovery.walker import Walker
    from .context import ToolContext
    from .tool_source import ToolSource
    from .tools import Tool


class AgentPort(Protocol):
    """What the run layer reads of an agent (`polyloop.Agent` is the one implementation)."""

    model: Model
    tools: list[Tool]
    sources: list[ToolSource]  # where some of the tools come from (MCP servers): held while a run goes
    system: str | None
    retry_backoff: float
    retry_max_delay: float
    approve_irreversible: bool
    on_alert: Callable[[dict[str, Any]], Any] | None
    logic_version: str | None
    _origin: str | None  # the file that built the agent: the first one `logic_version="auto"` hashes


class RunPort(Protocol):
    """A run being carried out, as the loop's helpers see it.

    Every record goes through `write`: it is made durable by the store (fail
    closed: a store failure raises `StoreError`), one record at a time, and
    then fed to `walker`, so the next decision is made from exactly what the
    log now says. `complete` writes a step's `step_completed` and extends the
    model's history; `execute` runs an action whose intent is already durable
    (its precondition, the tool, and the record of its outcome).
    """

    run_id: str
    agent: AgentPort
    store: Store
    walker: Walker
    tools: dict[str, Tool]
    alerted: set[str]  # failed verifications this process told `on_alert` about

    async def write(self, record: Record) -> None:
        """Make `record` durable, then feed it to the walker."""
        ...

    async def complete(
        self, step: int, rid: str | None, observation: str, is_error: bool, tool: str, history: _History
    ) -> None:
        """Complete `step` with `observation` (the outcome of `rid`, if any) and add it to `history`."""
        ...

    async def execute(self, tool: Tool, ctx: ToolContext, args: dict[str, Any], history: _History) -> None:
        """Run an action whose intent is durable: precondition, the tool, and its outcome."""
        ...
