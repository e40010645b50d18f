"""The connection to one MCP server, on an event loop and a thread of its own (`polyloop.mcp`).

The official SDK ties a connection to the task that opened it; an agent's
tools are listed from synchronous code (`Agent.tools`, when the run's
configuration is recorded) and called from whatever event loop runs the
agent (one per `asyncio.run`, many runs at once in a batch). So the
connection lives on a private loop in a daemon thread, and both kinds of
caller hand it coroutines.

What a call's failure means is decided here, once:

* the server cannot be reached or started before the request is written:
  `NotSent` (nothing happened; the connection is started again first, so
  a server that died between calls is simply restarted);
* the request was written and the answer never came (the server died,
  the stream dropped, the call timed out): `Lost` — the outcome is unknown;
* the server answered with a JSON-RPC error: `Refused` (a tool failure).

The `mcp` package is imported only here and in `polyloop.mcp`, never by the core.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import sys
import threading
from collections.abc import Callable, Coroutine
from typing import Any

# The SDK's own codes for a connection that closed and a request that timed out: the
# answer was lost, whatever the server did (a server answering with them is treated alike).
_LOST_CODES = (-32000, -32001)


class NotSent(Exception):
    """The request was never written: nothing of the call happened."""


class Lost(Exception):
    """The request was written and no answer came: the call's outcome is unknown."""


class Refused(Exception):
    """The server answered the request with a JSON-RPC error."""


class Link:
    """One server's connection: started on first use, restarted after the server died, closed on demand.

    Args:
        opener: makes a new (not yet entered) `mcp.Client` each time.
        what: how to name the server in errors (its command or URL).
        start_timeout: seconds a start (spawn and handshake) may take.
        ping_timeout: seconds the liveness check before each call (a tool listing) may take.
    """

    def __init__(self, opener: Callable[[], Any], what: str, *, start_timeout: float, ping_timeout: float) -> None:
        self._opener = opener
        self.what = what
        self._start_timeout = start_timeout
        self._ping_timeout = ping_timeout
        self._guard = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: Any = None
        self._stop: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._starting: asyncio.Lock | None = None
        self.starts = 0  # connections opened so far (a restart after a death is one more)

    # -- handing work to the private loop ------------------------------------------------

    def submit(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        with self._guard:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name=f"polyloop-mcp {self.what}", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def wait(self, coro: Coroutine[Any, Any, Any], timeout: float | None = None) -> Any:
        """Run `coro` on the link's loop from synchronous code and return its value."""
        return self.submit(coro).result(timeout)

    async def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run `coro` on the link's loop from another loop; cancelling the caller cancels it."""
        return await asyncio.wrap_future(self.submit(coro))

    def close(self) -> None:
        """Close the connection (the server's process ends) and stop the private loop."""
        with self._guard:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._disconnect(), loop).result(self._start_timeout + 10)
        except Exception:
            pass  # a server that will not close is left to its process's end
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(10)
        if not loop.is_running():
            loop.close()

    # -- on the private loop ---------------------------------------------------------------

    async def client(self) -> tuple[Any, list[Any]]:
        """A live client and the tools it lists now (`NotSent` if there is none).

        The open connection is asked for its tool list (the liveness check:
        the current protocol has no ping); one that does not answer is closed
        and a new one started (nothing of the caller's call was sent yet).
        """
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._client is not None:
                try:
                    return self._client, await asyncio.wait_for(self._list(self._client), self._ping_timeout)
                except Exception:  # dead or deaf: start again
                    await self._disconnect()
            await self._connect()
            try:
                return self._client, await asyncio.wait_for(self._list(self._client), self._start_timeout)
            except Exception as exc:
                await self._disconnect()
                raise NotSent(f"it does not list its tools: {_reason(exc)}") from None

    async def _connect(self) -> None:
        ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        stop = asyncio.Event()

        async def hold() -> None:
            try:
                async with self._opener() as client:
                    ready.set_result(client)
                    await stop.wait()
            except BaseException as exc:  # the SDK wraps a failed start in exception groups
                if not ready.done():
                    ready.set_exception(NotSent(_reason(exc)))
                if isinstance(exc, asyncio.CancelledError):
                    raise

        task = asyncio.ensure_future(hold())
        try:
            client = await asyncio.wait_for(asyncio.shield(ready), self._start_timeout)
        except asyncio.TimeoutError:
            stop.set()
            task.cancel()
            raise NotSent(f"it did not start within {self._start_timeout:g} s") from None
        self._client, self._stop, self._task = client, stop, task
        self.starts += 1

    async def _disconnect(self) -> None:
        stop, task = self._stop, self._task
        self._client = self._stop = self._task = None
        if stop is None or task is None:
            return
        stop.set()
        try:
            await asyncio.wait_for(task, self._start_timeout)
        except BaseException:
            task.cancel()

    async def call(self, client: Any, name: str, args: dict[str, Any], timeout: float | None) -> Any:
        """Call a tool on a client `client()` just returned; its `CallToolResult`, or `Lost` or `Refused`."""
        from mcp import MCPError

        try:
            # The session's call, not the client's: the client re-sends a call on some
            # errors, which would be a replay without a policy.
            return await client.session.call_tool(name, args, read_timeout_seconds=timeout)
        except MCPError as exc:
            if exc.code in _LOST_CODES:
                raise Lost(exc.message) from None
            raise Refused(f"the server refused the call: {exc.message} (JSON-RPC error {exc.code})") from None
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a transport that broke mid-call (HTTP, pipes): the answer is lost
            raise Lost(_reason(exc)) from None

    @staticmethod
    async def _list(client: Any) -> list[Any]:
        """Every tool the server lists (all pages)."""
        out: list[Any] = []
        cursor = None
        for _ in range(1000):
            page = await client.session.list_tools(params=_page(cursor))
            out.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        return out


def _page(cursor: str | None) -> Any:
    from mcp_types import PaginatedRequestParams

    return PaginatedRequestParams(cursor=cursor) if cursor is not None else None


def _reason(exc: BaseException) -> str:
    """The innermost cause of a (possibly grouped) exception, in a few words."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc) or type(exc).__name__
    return text if isinstance(exc, OSError) or type(exc).__name__ in text else f"{type(exc).__name__}: {text}"


class _SdkLog(logging.Handler):
    """The SDK's warnings, one line each on stderr, while the application has set up no logging.

    Left alone, a server that writes anything but JSON-RPC on its stdout (a
    banner) makes the SDK log each line with its traceback, which logging's
    last-resort handler prints raw. An application that configured logging
    (a handler on the root logger) gets the records as they are instead.
    """

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        if logging.getLogger().handlers:
            return
        lines = record.getMessage().strip().splitlines() or [""]
        exc = record.exc_info[1] if record.exc_info else None
        kind = f" ({type(exc).__name__})" if exc is not None else ""
        try:
            sys.stderr.write(f"MCP SDK: {lines[0].strip()}{kind}\n")
        except (OSError, ValueError):
            pass


def quiet_sdk_logs() -> None:
    """Install `_SdkLog` on the SDK's `mcp` logger (once; importing no SDK module)."""
    logger = logging.getLogger("mcp")
    if not any(isinstance(h, _SdkLog) for h in logger.handlers):
        logger.addHandler(_SdkLog())
