"""What the hosted-model adapters share: the bounded request, error mapping, Retry-After, safe URLs.

The official `openai` and `anthropic` SDKs raise errors of the same shape
(`APITimeoutError`, `APIConnectionError`, `APIStatusError` with `status_code`,
`response` and `body`), so one mapping onto `TransientModelError`
(`model_failure`) serves both; neither SDK is imported here. A hosted
model names its `endpoint` (provider and URL), so the runs of a process
that share it share one backoff (`polyloop._run.retry`).
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import importlib
import math
import os
import sys
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from types import ModuleType
from typing import Any

from .answer import MAX_ANSWER_BYTES, MalformedResponseError, decode_answer
from .._log.errors import TransientModelError
from .._log.unavailable import ModelRefusedError
from .._log.model_port import Message


class _BrokenAnswer(Exception):
    """The transfer of a 200 answer's body failed (the server hung up, a read timed out)."""


def model_failure(
    exc: Exception,
    url: str,
    sdk: ModuleType,
    *,
    timeout: float,
    retryable: tuple[int, ...] = (408, 409, 429),
    permanent: Callable[[Any], bool] = lambda exc: False,
) -> TransientModelError | ModelRefusedError | None:
    """What a failed model request is: transient, refused for good, or None (let it propagate).

    The one place a request's failure is classified. Transient (a
    `TransientModelError`: a failed attempt, asked again as a new attempt
    after a backoff; past the run's retry budget the run stops resumable):
    an unreadable answer (a `MalformedResponseError`, returned as it is), a
    request that outlived `timeout` seconds (whether the server still bills
    it is unknown), a connection refused or reset, an answer that broke off,
    5xx (Anthropic's 529 `overloaded_error` too) and the `retryable`
    statuses. Refused for good (a `ModelRefusedError`: the run ends with
    reason `error`, naming the provider's error): every other HTTP status
    (400, 401, 403, 404, 422) and whatever `permanent(exc)` says retrying
    cannot help (OpenAI's 429 `insufficient_quota`). Anything else (a bug)
    is returned as None.
    """
    if isinstance(exc, (TransientModelError, ModelRefusedError)):
        return exc
    if isinstance(exc, (TimeoutError, sdk.APITimeoutError)):
        return TransientModelError(f"the request to {url} timed out (timeout={timeout:g}s)")
    if isinstance(exc, _BrokenAnswer):
        cause = exc.__cause__
        return TransientModelError(f"the answer from {url} broke off: {type(cause).__name__}: {cause}")
    if isinstance(exc, sdk.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        detail = f": {type(cause).__name__}: {cause}" if cause else ""
        return TransientModelError(f"cannot connect to {url}{detail}")
    if not isinstance(exc, sdk.APIStatusError):
        return None
    status = exc.status_code
    if permanent(exc) or (status not in retryable and status < 500):
        what = _REFUSED.get(status, "refused")
        if permanent(exc):
            what = "out of quota"
        return ModelRefusedError(f"{what} (HTTP {status}) by {url}: {server_message(exc)}", status=status)
    what = {429: "rate limited", 529: "overloaded"}.get(status)
    what = what or ("server error" if status >= 500 else "try again")
    wait = retry_after(exc.response.headers)
    hint = "" if wait is None else f" (retry after {wait:g}s)"
    return TransientModelError(
        f"{what} (HTTP {status}) by {url}{hint}: {server_message(exc)}", retry_after=wait
    )


_REFUSED = {
    400: "bad request", 401: "authentication failed", 403: "permission denied", 404: "not found (is the model name right?)",
    413: "request too large", 422: "bad request",
}


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
    """Seconds the server asked to wait (`retry-after-ms`, `retry-after` seconds or date).

    None when it did not ask, or asked for something that is no wait (`nan`,
    `inf`, a date that cannot be read).
    """
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        try:
            seconds = float(headers.get(name) or "nan") / scale
        except ValueError:
            continue
        if math.isfinite(seconds):
            return max(0.0, seconds)
    value = headers.get("retry-after")
    try:
        when = email.utils.parsedate_to_datetime(value or "")
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
        self.endpoint = ""  # set below, once the URL is known
        self.timeout = timeout
        self._api_key: str | None = None
        if client is not None:
            self._client = client.with_options(max_retries=0, timeout=timeout)
            self.base_url = str(self._client.base_url).rstrip("/")
            self.endpoint = f"{self._kind} {public_url(self.base_url)}"
            return
        self._client = None
        self.base_url = (base_url or os.environ.get(self._url_env) or self._default_url).rstrip("/")
        self.endpoint = f"{self._kind} {public_url(self.base_url)}"
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
        create: Callable[[Any], AbstractAsyncContextManager[Any]],
        *,
        retryable: tuple[int, ...] = (408, 409, 429),
        permanent: Callable[[Any], bool] = lambda exc: False,
    ) -> dict[str, Any]:
        """The decoded answer of `create(client)`, on the shared client or a fresh one.

        `create` opens the SDK call's streaming-response form, so the body is
        read here, at most `MAX_ANSWER_BYTES` of it. The whole request —
        connecting, sending, waiting, reading — must end within `timeout`
        seconds of wall-clock time: the SDK's own timeout bounds each wait
        for a byte, not the request, and a server that drips a valid answer
        would hold the run for hours. A caller's cancellation propagates
        unchanged; either way the response and a fresh client are closed.
        Failures are classified by `model_failure`.
        """
        try:
            async with asyncio.timeout(self.timeout):
                if self._client is not None:
                    data = await _read(create(self._client))
                else:
                    async with new_client(
                        api_key=self._api_key, base_url=self.base_url, timeout=self.timeout, max_retries=0,
                        http_client=_fresh_http_client(sdk),
                    ) as client:
                        data = await _read(create(client))
            return decode_answer(data)
        except Exception as exc:
            failure = model_failure(
                exc, public_url(self.base_url), sdk, timeout=self.timeout, retryable=retryable, permanent=permanent
            )
            if failure is None or failure is exc:
                raise
            raise failure from exc


async def _read(opened: AbstractAsyncContextManager[Any]) -> bytes:
    """The body of a successful answer, read in chunks and refused past `MAX_ANSWER_BYTES`."""
    chunks: list[bytes] = []
    size = 0
    async with opened as response:
        try:
            async for chunk in response.iter_bytes():
                size += len(chunk)
                if size > MAX_ANSWER_BYTES:
                    raise MalformedResponseError(f"the answer is larger than {MAX_ANSWER_BYTES} bytes")
                chunks.append(chunk)
        except MalformedResponseError:
            raise
        except Exception as exc:
            raise _BrokenAnswer() from exc
    return b"".join(chunks)


def _fresh_http_client(sdk: ModuleType) -> Any | None:
    """The SDK's default HTTP client, on the process's one TLS context (None: let the SDK make it)."""
    tls = _tls_context(sdk.DefaultAsyncHttpxClient)
    return None if tls is None else sdk.DefaultAsyncHttpxClient(verify=tls)


@functools.cache
def _tls_context(client_class: type) -> Any | None:
    """The TLS context `client_class` would build for itself, built once per process.

    Building one loads the whole CA bundle (~60 ms of CPU), and every model call
    opens a fresh client (see `HostedModel._send`). The context is what the HTTP
    library's own `create_ssl_context()` gives (its CA bundle, `SSL_CERT_FILE`
    and `SSL_CERT_DIR` honoured as it honours them); an SSL context may be
    shared across threads and event loops. None when the library offers no
    `create_ssl_context`: each client then builds its own, as before.
    """
    for base in client_class.__mro__:
        make = getattr(sys.modules.get(base.__module__.partition(".")[0]), "create_ssl_context", None)
        if callable(make):
            return make()
    return None


def _host(url: str) -> str:
    return urllib.parse.urlsplit(url).hostname or ""
