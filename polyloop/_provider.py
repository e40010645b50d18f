"""What the hosted-model adapters share: error mapping, Retry-After, safe URLs, configuration.

The official `openai` and `anthropic` SDKs raise errors of the same shape
(`APITimeoutError`, `APIConnectionError`, `APIStatusError` with `status_code`,
`response` and `body`), so one mapping onto `TransientModelError` serves both;
neither SDK is imported here.
"""

from __future__ import annotations

import email.utils
import importlib
import os
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

from ._errors import TransientModelError
from ._model import Message, Usage


class MalformedResponseError(TransientModelError):
    """The server answered, but the answer cannot be read as a decision.

    Raised when the answer has no choices or no content, or when one of the
    model's tool calls carries arguments that are not a JSON object (small
    models do this). It is a `TransientModelError`: the run loop records the
    failed attempt, with the raw arguments in its error, and asks the model
    again as a new attempt — a fresh sample usually parses. No action intent
    is written for an answer that could not be read.

    Attributes:
        raw: the unreadable tool-call arguments (None for other problems).
        usage: the tokens the server says the unreadable answer cost, if it
            said (recorded in the failed attempt's `model_call_result`).
    """

    def __init__(self, message: str, *, raw: str | None = None, usage: Usage | None = None) -> None:
        super().__init__(message, usage=usage)
        self.raw = raw


def bad_arguments(name: str, raw: Any, usage: Usage | None) -> MalformedResponseError:
    """The error for a tool call whose arguments are not a JSON object."""
    shown = raw if isinstance(raw, str) else repr(raw)
    shown = shown if len(shown) <= 500 else shown[:497] + "..."
    return MalformedResponseError(
        f"the model called {name!r} with arguments that are not a JSON object: {shown!r}",
        raw=raw if isinstance(raw, str) else repr(raw),
        usage=usage,
    )


def transient_error(
    exc: Exception,
    url: str,
    sdk: ModuleType,
    *,
    retryable: tuple[int, ...] = (408, 409, 429),
    permanent: Callable[[Any], bool] = lambda exc: False,
) -> TransientModelError | None:
    """The `TransientModelError` for a retryable SDK error, or None (let it propagate).

    Timeouts, connection errors, 5xx and the `retryable` statuses are
    transient, unless `permanent(exc)` says retrying cannot help (OpenAI's
    429 `insufficient_quota`).
    """
    if isinstance(exc, sdk.APITimeoutError):
        return TransientModelError(f"the request to {url} timed out")
    if isinstance(exc, sdk.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        detail = f": {type(cause).__name__}: {cause}" if cause else ""
        return TransientModelError(f"cannot connect to {url}{detail}")
    if not isinstance(exc, sdk.APIStatusError):
        return None
    status = exc.status_code
    if permanent(exc) or (status not in retryable and status < 500):
        return None
    what = {429: "rate limited", 529: "overloaded"}.get(status)
    what = what or ("server error" if status >= 500 else "try again")
    wait = retry_after(exc.response.headers)
    hint = "" if wait is None else f" (retry after {wait:g}s)"
    return TransientModelError(
        f"{what} (HTTP {status}) by {url}{hint}: {server_message(exc)}", retry_after=wait
    )


def server_message(exc: Any) -> str:
    """The server's own words from an error body (OpenAI's or Anthropic's shape)."""
    body = exc.body
    if isinstance(body, Mapping):
        inner = body.get("error")
        for doc in (body, inner if isinstance(inner, Mapping) else {}):
            if isinstance(doc.get("message"), str):
                return doc["message"]
    return str(exc.message)


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds the server asked to wait (`retry-after-ms`, `retry-after` seconds or date)."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def public_url(url: str) -> str:
    """The URL without any user:password part, safe to record and print."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def import_extra(name: str) -> ModuleType:
    """Import the SDK of an optional extra, or fail with an ImportError that names the extra."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise ImportError(
            f"polyloop.{name} needs the `{name}` package, an optional extra of polyloop: "
            f"pip install 'polyloop[{name}]'",
            name=name,
        ) from exc


_LOCAL_KEY = "unused"


class HostedModel:
    """Configuration, description and the one request of an SDK-backed model (see its subclasses).

    Subclasses name their SDK, environment variables and default URL as
    class attributes; this class resolves them, turns the SDK's retries off
    and maps its errors.
    """

    _kind = "HostedModel"
    _model_env = ""
    _url_env = ""
    _key_env = ""
    _default_url = ""
    _reserved: frozenset[str] = frozenset()

    def __init__(
        self,
        *,
        model: str | None,
        base_url: str | None,
        api_key: str | None,
        timeout: float,
        params: Mapping[str, Any] | None,
        client: Any | None,
    ) -> None:
        name = model or os.environ.get("POLYLOOP_MODEL") or os.environ.get(self._model_env)
        if not name:
            raise ValueError(
                f"{self._kind} needs a model name: set POLYLOOP_MODEL (or {self._model_env}), "
                "or pass model=..."
            )
        clashes = sorted(self._reserved.intersection(params or {}))
        if clashes:
            raise ValueError(f"params must not set {', '.join(clashes)}: the adapter sends those")
        self.model = name
        self.params = dict(params or {})
        self.timeout = timeout
        self._api_key: str | None = None
        if client is not None:
            self._client = client.with_options(max_retries=0, timeout=timeout)
            self.base_url = str(self._client.base_url).rstrip("/")
            return
        self._client = None
        self.base_url = (base_url or os.environ.get(self._url_env) or self._default_url).rstrip("/")
        key = api_key or os.environ.get(self._key_env)
        if not key:
            if _host(self.base_url) == _host(self._default_url):
                raise ValueError(
                    f"{self._kind} needs an API key for {self.base_url}: set {self._key_env}, "
                    f"or pass api_key=...; for a local server set {self._url_env}"
                )
            key = _LOCAL_KEY  # local servers usually ignore the key, but the SDKs want one
        self._api_key = key

    def __repr__(self) -> str:
        return f"{self._kind}(model={self.model!r}, base_url={public_url(self.base_url)!r})"

    def request(self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The request body `complete` would send: the converted history and tools, then `params`."""
        body = self._body(messages, tools)
        body.update(self.params)
        return body

    def _body(self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        raise NotImplementedError

    def _described(self, **more: Any) -> dict[str, Any]:
        doc: dict[str, Any] = {"type": self._kind, "model": self.model, "base_url": public_url(self.base_url)}
        doc.update(more)
        if self.params:
            doc["params"] = dict(self.params)
        return doc

    async def _send(
        self,
        sdk: ModuleType,
        new_client: Callable[..., Any],
        create: Callable[[Any], Awaitable[Any]],
        *,
        retryable: tuple[int, ...] = (408, 409, 429),
        permanent: Callable[[Any], bool] = lambda exc: False,
    ) -> Any:
        """`create(client)` on the shared client or a fresh one, SDK errors mapped (see `transient_error`)."""
        try:
            if self._client is not None:
                return await create(self._client)
            async with new_client(
                api_key=self._api_key, base_url=self.base_url, timeout=self.timeout, max_retries=0
            ) as client:
                return await create(client)
        except sdk.APIError as exc:
            transient = transient_error(
                exc, public_url(self.base_url), sdk, retryable=retryable, permanent=permanent
            )
            if transient is None:
                raise
            raise transient from exc


def _host(url: str) -> str:
    return urllib.parse.urlsplit(url).hostname or ""
