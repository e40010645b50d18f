"""Tools from Model Context Protocol servers, under PolyLoop's guarantees (`pip install 'polyloop[mcp]'`).

Declare a server among an agent's tools and its tools become ordinary
PolyLoop tools: the model's arguments are checked against each tool's input
schema before the intent, every call has a durable intent first, its answer
is recorded as the tool's result, approvals, recovery and `polyloop inspect`
treat it like any `@tool`::

    from polyloop import Agent
    from polyloop.mcp import MCPServer

    git = MCPServer("git", command="mcp-server-git --repository /srv/repo", trust=True)
    agent = Agent(model=model, tools=[git])

The replay policy of each tool comes from its annotations only when the
server is declared trusted (`trust=True`); an untrusted server's tools are
all `never`, whatever they claim. A per-tool override always wins. The
effective policy and where it came from are recorded in `run_started`
(`config.tools[].mcp`, log format 1.4), shown by `polyloop inspect`, and
part of the configuration's fingerprint: a server whose tools changed since
the run started makes a resume refuse (`CheckpointError`, exit code 4).

A call whose request went out and whose answer never came (the server
died, the stream dropped, the call timed out) has an unknown outcome: a
`never` call stops the run for an operator, a `safe` one is replayed;
a JSON-RPC error or an `isError` result is a tool failure the model reads.
See docs/how-to/use-mcp-tools.md.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import importlib.util
import shlex
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from ._log.errors import PolyLoopError
from ._mcp_link import Link, Lost, NotSent, Refused, quiet_sdk_logs
from ._run.context import ToolContext
from ._run.tool_source import ToolSource
from ._run.tools import Approval, Replay, Tool, ToolAnswerLostError, _Guards, check_policy

__all__ = ["MCPServer", "MCPServerError", "MCPTool", "MCPToolError", "policy_of"]

# Argument names through which a tool takes an idempotency key: PolyLoop fills them
# (the call's stable key, the same on every replay) and does not show them to the model.
KEY_PARAMETERS = ("idempotency_key", "idempotencyKey")
_OVERRIDABLE = frozenset({"replay", "approval", "max_failures", "concurrent"})
_HINTS = (("read_only_hint", "readOnlyHint"), ("destructive_hint", "destructiveHint"),
          ("idempotent_hint", "idempotentHint"), ("open_world_hint", "openWorldHint"))
quiet_sdk_logs()  # the SDK's warnings in one line each, not with their tracebacks


class MCPServerError(PolyLoopError):
    """An MCP server could not be started or reached to list its tools (the message names its command or URL)."""


class MCPToolError(Exception):
    """An MCP tool's call failed: the server answered with `isError` or a JSON-RPC error (the model reads it)."""


def policy_of(
    annotations: Mapping[str, Any] | None, *, trusted: bool, approve_destructive: bool = False
) -> tuple[Replay, str | None, str]:
    """(replay, approval, why) of a tool from its annotations (camelCase keys, as on the wire).

    Untrusted: `never`, whatever the tool claims, and with
    `approve_destructive` every call waits for approval (no claim of an
    untrusted server counts, so each of its tools is destructive, the spec's
    default). Trusted: `readOnlyHint` -> `safe`; `idempotentHint` and
    `destructiveHint: false` -> `safe`; otherwise `never` (destructive is the
    spec's default), and `required` approval when `approve_destructive` and
    the tool is destructive.
    """
    if not trusted:
        if approve_destructive:
            return "never", "required", ("untrusted server: every tool is never and, with approve_destructive, "
                                         "waits for approval, whatever it claims")
        return "never", None, "untrusted server: every tool is never, whatever it claims"
    a = annotations or {}
    if a.get("readOnlyHint") is True:
        return "safe", None, "trusted server, readOnlyHint"
    destructive = a.get("destructiveHint") is not False
    if a.get("idempotentHint") is True and not destructive:
        return "safe", None, "trusted server, idempotentHint and not destructive"
    approval = "required" if approve_destructive and destructive else None
    if a.get("destructiveHint") is True:
        why = "trusted server, destructiveHint"
    elif destructive:
        why = "trusted server, no destructiveHint: destructive by default"
    else:
        why = "trusted server, neither read-only nor idempotent"
    return "never", approval, why


def _check_numbers(server: str, prefix: Any, timeout: Any, start_timeout: Any) -> None:
    if not isinstance(prefix, str):
        raise TypeError(f"MCP server {server!r}: prefix must be a string, not {prefix!r}")
    for what, value, none in (("timeout", timeout, True), ("start_timeout", start_timeout, False)):
        if (value is None and none) or (type(value) in (int, float) and value > 0):
            continue
        raise ValueError(f"MCP server {server!r}: {what} must be a positive number of seconds"
                         f"{' or None' if none else ''}, not {value!r}")


def _check_override(server: str, tool: str, o: Any) -> dict[str, Any]:
    """Refuse an override the tool could not take, when the server is declared (not when a run lists it)."""
    where = f"MCP server {server!r}: override of {tool!r}"
    if not isinstance(o, Mapping):
        raise ValueError(f"{where} must be a dict such as {{'replay': 'never'}}, not {o!r}")
    o = dict(o)
    unknown = sorted(set(o) - _OVERRIDABLE)
    if unknown:
        raise ValueError(f"{where} has unknown keys {unknown}; use {sorted(_OVERRIDABLE)}")
    try:
        check_policy(**{k: v for k, v in o.items() if k != "concurrent"})
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    if "concurrent" in o and type(o["concurrent"]) is not bool:
        raise ValueError(f"{where}: concurrent must be True or False, not {o['concurrent']!r}")
    return o


class MCPServer(ToolSource):
    """An MCP server whose tools an agent uses; put it in `Agent(tools=[...])`.

    The server is started (or connected to) on first need: when a run
    records its configuration, which lists the tools. It is started again
    when it died between calls, and closed when the last run using it stops.

    Args:
        name: the server's name in the log, `inspect` and errors.
        command: a stdio server's command (a string split like a shell
            would, or a list of arguments). Exactly one of `command` and `url`.
        url: a streamable HTTP server's URL.
        env: environment variables for a stdio server (added to the SDK's
            safe default environment).
        cwd: a stdio server's working directory.
        trust: derive each tool's policy from its annotations. False (the
            default): every tool is `replay="never"`, whatever it claims.
        approve_destructive: every call of a destructive tool
            (`destructiveHint`, or no annotation) waits for a person's
            approval; on an untrusted server, where no claim counts, every
            call of every tool.
        overrides: per tool (by its server name), what the agent says
            instead: `{"replay": "safe" | "never", "approval": "required" |
            predicate | None, "max_failures": N, "concurrent": bool}`. An
            override always wins, trusted or not.
        only: the names of the tools to offer (default: every listed tool).
        prefix: put before each tool's name for the model (to keep two
            servers' tool names apart).
        timeout: seconds a call may wait for its answer; past it the
            answer is lost (unknown outcome). None: no limit.
        start_timeout: seconds starting the server (and its handshake) may take.
    """

    def __init__(
        self,
        name: str,
        *,
        command: str | Sequence[str] | None = None,
        url: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        trust: bool = False,
        approve_destructive: bool = False,
        overrides: Mapping[str, Mapping[str, Any]] | None = None,
        only: Iterable[str] | None = None,
        prefix: str = "",
        timeout: float | None = 60.0,
        start_timeout: float = 30.0,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError("an MCP server needs a name")
        if (command is None) == (url is None):
            raise ValueError(f"MCP server {name!r}: give exactly one of command= (stdio) and url= (streamable HTTP)")
        if type(trust) is not bool or type(approve_destructive) is not bool:
            raise TypeError("trust and approve_destructive must be True or False")
        if importlib.util.find_spec("mcp") is None:
            raise ImportError("polyloop.mcp needs the MCP SDK: pip install 'polyloop[mcp]'")
        self.name = name
        self.trust = trust
        self.approve_destructive = approve_destructive
        _check_numbers(name, prefix, timeout, start_timeout)
        self.overrides = {k: _check_override(name, k, v) for k, v in (overrides or {}).items()}
        if isinstance(only, str):
            raise TypeError(f"MCP server {name!r}: only= takes a list of tool names, not the string {only!r}")
        self.only = None if only is None else list(only)
        self.prefix = prefix
        self.timeout = timeout
        self.command = None if command is None else shlex.split(command) if isinstance(command, str) else list(command)
        if self.command is not None and not self.command:
            raise ValueError(f"MCP server {name!r}: the command is empty")
        if url is not None and (not isinstance(url, str) or not url.strip()):
            raise ValueError(f"MCP server {name!r}: the URL is empty")
        self.url = url
        self.where = shlex.join(self.command) if self.command else str(url)
        self._env = dict(env) if env is not None else None
        self._cwd = cwd
        self._link = Link(self._opener, self.where, start_timeout=start_timeout, ping_timeout=min(start_timeout, 10.0))
        self._tools: list[MCPTool] | None = None
        self._digest: str | None = None
        self._stale = False
        self._holders = 0

    def __repr__(self) -> str:
        return f"<MCPServer {self.name} {self.where} trust={self.trust}>"

    @property
    def starts(self) -> int:
        """How many times this process started (or connected to) the server."""
        return self._link.starts

    # -- ToolSource ------------------------------------------------------------------------

    def tools(self) -> list[Tool]:
        """The server's tools as PolyLoop tools (listed from the server on first need).

        Raises:
            MCPServerError: the server cannot be started or does not list its tools.
        """
        if self._tools is None or self.stale():
            try:
                listed = self._link.wait(self._list(), timeout=None)
            except NotSent as exc:
                raise MCPServerError(f"MCP server {self.name!r} could not start: {self.where}: {exc}") from None
            except Exception as exc:
                raise MCPServerError(f"MCP server {self.name!r} ({self.where}) did not list its tools: {exc}") from None
            self._tools = self._build(listed)
            self._digest = _listing_digest(listed)
            self._stale = False
        return list(self._tools)

    def stale(self) -> bool:
        # Not while a run holds the server: a listing that changed under a run is not taken up by it (its
        # calls are refused, nothing sent) until the run stops; the next run or resume lists again and
        # compares with what the run recorded.
        return self._stale and self._holders == 0

    def hold(self) -> None:
        self._holders += 1

    async def release(self) -> None:
        self._holders -= 1
        if self._holders <= 0:
            self._holders = 0
            await asyncio.to_thread(self.close)

    def close(self) -> None:
        """Close the connection now (the server's process ends); the next need starts it and lists again."""
        self._link.close()
        if self._tools is not None:
            self._stale = True

    # -- on the link's loop ----------------------------------------------------------------

    def _opener(self) -> Any:
        from mcp import Client, StdioServerParameters
        from mcp.client.stdio import stdio_client

        if self.command is not None:
            params = StdioServerParameters(command=self.command[0], args=self.command[1:], env=self._env, cwd=self._cwd)
            return Client(stdio_client(params, errlog=_server_stderr()), cache=None)
        return Client(self.url, cache=None)

    async def _list(self) -> list[Any]:
        return (await self._link.client())[1]

    async def _call(self, remote: str, args: dict[str, Any]) -> Any:
        client, listed = await self._link.client()
        if _listing_digest(listed) != self._digest:  # not the tools the run was configured with
            self._stale = True
            raise NotSent("its tool list changed since the run listed it (start the run again, or resume it)")
        return await self._link.call(client, remote, args, self.timeout)

    # -- the tools ---------------------------------------------------------------------------

    def _build(self, listed: list[Any]) -> list[MCPTool]:
        names = {t.name for t in listed}
        missing = sorted((set(self.overrides) | set(self.only or ())) - names)
        if missing:
            raise MCPServerError(f"MCP server {self.name!r} ({self.where}) lists no tool {missing[0]!r} "
                                 f"(it lists {', '.join(sorted(names)) or 'none'})")
        keep = [t for t in listed if self.only is None or t.name in self.only]
        return [MCPTool(self, t) for t in keep]


class MCPTool(Tool):
    """One tool of an MCP server, as an ordinary PolyLoop tool (made by `MCPServer.tools`).

    Attributes:
        remote: the tool's name on the server.
        annotations: its annotations as the server listed them (camelCase keys).
        origin: what `run_started` records (`config.tools[].mcp`): server,
            tool, trusted, annotations, policy (`untrusted`, `annotations` or
            `override`) and why.
    """

    def __init__(self, server: MCPServer, listed: Any) -> None:
        self.server = server
        self.remote: str = listed.name
        self.annotations = _annotations(listed)
        replay, approval, why = policy_of(self.annotations, trusted=server.trust,
                                          approve_destructive=server.approve_destructive)
        source = "annotations" if server.trust else "untrusted"
        override = server.overrides.get(self.remote, {})
        if "replay" in override or "approval" in override:  # the policy itself (max_failures, concurrent are not)
            said = f"the agent's override of {sorted(override)}"
            why = said if "replay" in override else f"{said}; replay: {why}"
            replay, approval, source = override.get("replay", replay), override.get("approval", approval), "override"
        elif override:
            why = f"{why}; the agent's override of {sorted(override)}"
        self.irreversible = False
        self.concurrent = bool(override.get("concurrent", True))
        self.approval: Approval = approval  # type: ignore[assignment]
        self.max_failures = override.get("max_failures")
        self.question = False
        self.guards = _Guards()
        self.fn = _remote
        self.name = server.prefix + listed.name
        self.description = listed.description or getattr(listed, "title", None) or ""
        self.replay = replay
        self.is_async = True
        self._checked = {}
        schema = copy.deepcopy(listed.input_schema) if isinstance(listed.input_schema, dict) else {"type": "object"}
        self.key_parameter = _hide_key(schema)
        self.parameters = schema
        self._validator: Any = None
        origin: dict[str, Any] = {"server": server.name, "tool": self.remote, "trusted": server.trust,
                                  "annotations": self.annotations, "policy": source, "why": why}
        if self.key_parameter is not None:
            origin["idempotency_key"] = self.key_parameter
        self.origin = origin

    def check_args(self, args: Any) -> str | None:
        """Check a model's arguments against the tool's input schema (JSON Schema), before any intent."""
        if not isinstance(args, dict):
            kind = {list: "an array", str: "a string", type(None): "null"}.get(type(args), type(args).__name__)
            return f"invalid arguments for tool {self.name!r}: the arguments must be a JSON object, not {kind}"
        try:
            errors = list(self._checker().iter_errors(args))
        except Exception:  # a schema the validator cannot use checks nothing (the server checks)
            return None
        if not errors:
            return None
        parts = [f"{'.'.join(str(p) for p in e.absolute_path) or '(arguments)'}: {e.message}" for e in errors[:5]]
        return f"invalid arguments for tool {self.name!r}: " + "; ".join(parts)

    def _checker(self) -> Any:
        if self._validator is None:
            from jsonschema.validators import validator_for

            self._validator = validator_for(self.parameters)(self.parameters)
        return self._validator

    async def invoke(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        """Call the tool on its server; the text of its answer.

        Raises:
            ToolAnswerLostError: the request went out and no answer came (unknown outcome).
            MCPToolError: the server answered `isError` or a JSON-RPC error.
            MCPServerError: the server could not be (re)started; nothing was sent.
        """
        send = dict(args)
        if self.key_parameter is not None:
            send[self.key_parameter] = ctx.idempotency_key
        s = self.server
        try:
            result = await s._link.run(s._call(self.remote, send))
        except NotSent as exc:
            raise MCPServerError(f"MCP server {s.name!r} ({s.where}) could not be reached; nothing was sent: {exc}") from None
        except Lost as exc:
            raise ToolAnswerLostError(ctx.run_id, self.name, ctx.result_id, f"MCP server {s.name!r}: {exc}") from None
        except Refused as exc:
            raise MCPToolError(str(exc)) from None
        text = answer_text(result)
        if result.is_error:
            raise MCPToolError(text or "the tool reported an error")
        return text


def _server_stderr() -> Any:
    """Where a stdio server's stderr goes: ours, or the process's own when ours is no file (a notebook's)."""
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None:
                stream.fileno()
                return stream
        except (AttributeError, OSError, ValueError):
            continue
    return subprocess.DEVNULL


def _remote(**_: Any) -> Any:
    raise TypeError("an MCP tool runs on its server: call it through a run (or `await tool.invoke(args, ctx)`)")


def _annotations(listed: Any) -> dict[str, Any]:
    a = getattr(listed, "annotations", None)
    if a is None:
        return {}
    return {wire: getattr(a, attr) for attr, wire in _HINTS if getattr(a, attr, None) is not None}


def _hide_key(schema: dict[str, Any]) -> str | None:
    """Take the idempotency-key argument out of the schema shown to the model; its name, if any."""
    props = schema.get("properties")
    if not isinstance(props, dict):
        return None
    for name in KEY_PARAMETERS:
        if name in props:
            del props[name]
            if isinstance(schema.get("required"), list):
                schema["required"] = [r for r in schema["required"] if r != name]
            return name
    return None


def _listing_digest(listed: list[Any]) -> str:
    shape = [[t.name, t.input_schema, _annotations(t), t.description] for t in listed]
    return hashlib.sha256(orjson.dumps(shape, option=orjson.OPT_SORT_KEYS, default=repr)).hexdigest()


def answer_text(result: Any) -> str:
    """The observation a `CallToolResult` becomes: its text blocks; others described; else its structured content."""
    parts: list[str] = []
    for block in result.content or []:
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} {block.mime_type}, {len(block.data)} base64 characters]")
        elif kind == "resource_link":
            parts.append(f"[resource {block.uri}]")
        elif kind == "resource":
            parts.append(getattr(block.resource, "text", None) or f"[resource {block.resource.uri}]")
        else:
            parts.append(block.model_dump_json() if hasattr(block, "model_dump_json") else str(block))
    if not parts and result.structured_content is not None:
        parts.append(orjson.dumps(result.structured_content, default=repr).decode())
    return "\n".join(parts)
