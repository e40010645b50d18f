"""The plumbing the fake model servers share: scripted answers, a bounded HTTP server, a request log.

Each fake (`_fake_openai`, `_fake_anthropic`) supplies only what its API
looks like: the route, how a request is checked, how an answer and an error
are written, and how a key is checked. Standard library only.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import selectors
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Args = Mapping[str, Any] | str

DELETE: Any = type("_Delete", (), {"__repr__": lambda self: "DELETE"})()
"""An edit's value that removes the field (see `FakeResponse.edit`)."""


@dataclass(frozen=True, slots=True)
class FakeResponse:
    """One scripted answer of a fake model server (the same for every fake API).

    Build one with `tool_call`, `final`, `error` or `raw`. Every kind may
    carry a `delay` in seconds before the server answers, and a `drip` that
    sends the body one byte at a time (for timeout tests); `edit` changes one
    field of the answer document (for malformed-answer tests).

    Attributes:
        status: the HTTP status (200 for an answer).
        text: the assistant's text.
        tool_calls: `(name, arguments)` pairs; arguments given as a dict are
            sent as a JSON object, a str is sent as is (to test malformed
            arguments).
        usage: `(input_tokens, output_tokens)`; None computes a
            deterministic estimate from the request and the answer, and
            `False` leaves usage out of the answer.
        error_body: for a non-200 status, `{"message", "type", "param", "code"}`.
        headers: extra response headers (e.g. `retry-after`).
        delay: seconds to wait before answering.
        finish_reason: overrides the computed finish (OpenAI) or stop (Anthropic) reason.
        cache: `(cache_read_input_tokens, cache_creation_input_tokens)` reported
            by the Anthropic fake (None: not reported).
        edits: `(path, value)` pairs applied to the answer document, in order
            (see `edit`).
        body: the exact bytes to send instead of the answer document.
        drip: seconds between the bytes of the body (0: all at once).
    """

    status: int = 200
    text: str | None = None
    tool_calls: tuple[tuple[str, dict[str, Any] | str], ...] = ()
    usage: tuple[int, int] | None | bool = None
    error_body: dict[str, Any] | None = None
    headers: tuple[tuple[str, str], ...] = ()
    delay: float = 0.0
    finish_reason: str | None = None
    cache: tuple[int, int] | None = None
    edits: tuple[tuple[str, Any], ...] = ()
    body: bytes | None = None
    drip: float = 0.0

    @classmethod
    def tool_call(
        cls,
        name: str,
        args: Args | None = None,
        *,
        text: str | None = None,
        usage: tuple[int, int] | None | bool = None,
        delay: float = 0.0,
        more: Iterable[tuple[str, Args]] = (),
    ) -> FakeResponse:
        """An answer that calls tool `name` with `args` (`more` adds further calls, in order)."""
        first = (name, args if isinstance(args, str) else dict(args or {}))
        rest = tuple((n, a if isinstance(a, str) else dict(a)) for n, a in more)
        return cls(text=text, tool_calls=(first, *rest), usage=usage, delay=delay)

    @classmethod
    def final(
        cls, text: str, *, usage: tuple[int, int] | None | bool = None, delay: float = 0.0
    ) -> FakeResponse:
        """An answer with text and no tool call: the model's final answer."""
        return cls(text=text, usage=usage, delay=delay)

    @classmethod
    def error(
        cls,
        status: int,
        message: str | None = None,
        *,
        type: str | None = None,
        code: str | None = None,
        retry_after: float | None = None,
        delay: float = 0.0,
    ) -> FakeResponse:
        """A failed request: HTTP `status` with an error body in the API's own shape.

        `retry_after` adds a `retry-after` header (seconds).
        """
        body = {
            "message": message or f"fake server: scripted HTTP {status}",
            "type": type,
            "param": None,
            "code": code,
        }
        headers = () if retry_after is None else (("retry-after", f"{retry_after:g}"),)
        return cls(status=status, error_body=body, headers=headers, delay=delay)

    @classmethod
    def raw(cls, body: bytes | str, *, content_type: str = "application/json", status: int = 200) -> FakeResponse:
        """An answer whose body is exactly `body` (not JSON, HTML, empty, a JSON array...)."""
        data = body.encode() if isinstance(body, str) else bytes(body)
        return cls(status=status, body=data, headers=(("content-type", content_type),))

    def edit(self, path: str, value: Any) -> FakeResponse:
        """This answer with the field at `path` set to `value` (`DELETE` removes it).

        `path` names the field in the API's answer document with dots, list
        indexes as numbers: `"choices.0.message.tool_calls.0.function.name"`,
        `"usage.input_tokens"`; `""` replaces the whole document.
        """
        return dataclasses.replace(self, edits=(*self.edits, (path, value)))

    def edited(self, doc: Any) -> Any:
        """The answer document `doc` with `edits` applied."""
        for path, value in self.edits:
            doc = _set(doc, path.split(".") if path else [], value)
        return doc

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> FakeResponse:
        """Read `{"tool", "args"}`, `{"calls": [...]}`, `{"final"}` or `{"error": STATUS}`.

        The same shapes `ScriptedModel` reads, plus `error`; each may carry
        `text`, `usage` (`{"input_tokens", "output_tokens"}`) and `delay`.
        """
        usage = obj.get("usage")
        pair = None if usage is None else (int(usage["input_tokens"]), int(usage["output_tokens"]))
        delay = float(obj.get("delay", 0.0))
        calls = obj["calls"] if "calls" in obj else [obj] if "tool" in obj else []
        if calls:
            (head, *rest) = [(str(c["tool"]), c.get("args") or {}) for c in calls]
            return cls.tool_call(*head, text=obj.get("text"), usage=pair, delay=delay, more=rest)
        if "final" in obj:
            return cls.final(str(obj["final"]), usage=pair, delay=delay)
        if "error" in obj:
            return cls.error(int(obj["error"]), obj.get("message"), delay=delay)
        raise ValueError(f"expected 'tool', 'calls', 'final' or 'error' in {dict(obj)!r}")

    def estimated_usage(self, body: Any, answer: Any) -> tuple[int, int] | None:
        """`usage` as given, or a deterministic estimate; None when left out."""
        if self.usage is False:
            return None
        if isinstance(self.usage, tuple):
            return self.usage
        return max(1, len(json.dumps(body.get("messages"))) // 4), max(1, len(json.dumps(answer)) // 4)


@dataclass(frozen=True, slots=True)
class FakeRequest:
    """One request a fake server received.

    Attributes:
        method: `GET` or `POST`.
        path: the request path (e.g. `/v1/chat/completions`).
        headers: the request headers, names lowercased.
        body: the decoded JSON body (None when there was none or it was not JSON).
        status: the status the server answered with.
    """

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    status: int

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The messages the request carried."""
        return list((self.body or {}).get("messages") or [])

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The tool definitions the request carried."""
        return list((self.body or {}).get("tools") or [])


def _set(doc: Any, keys: list[str], value: Any) -> Any:
    if not keys:
        return value
    key: Any = int(keys[0]) if isinstance(doc, list) else keys[0]
    if len(keys) > 1:
        doc[key] = _set(doc[key], keys[1:], value)
    elif value is DELETE:
        del doc[key]
    else:
        doc[key] = value
    return doc


Responder = Callable[[dict[str, Any]], FakeResponse]


class FakeServer:
    """A scripted model API on 127.0.0.1: the lifecycle, the script and the request log.

    Answers the API's route with the next scripted `FakeResponse` (or, once
    the script is used up, with `responder(body)` if one is given, else HTTP
    400 "script exhausted"), and `GET .../models` with the one model it
    serves. Subclasses set `route` and `base_path` and implement `invalid`,
    `answer`, `error_doc` and `authorized`.

    Args:
        script: the answers to give, in order.
        responder: answers requests once the script is used up.
        model: the model name it reports.
        api_key: when set, requests without the key get HTTP 401.
        lifetime: seconds after which the server stops by itself.
        port: the port to listen on (0 picks a free one).
    """

    route = "/"
    base_path = ""
    thread_name = "fake-model-server"
    auth_message = "invalid API key"

    def __init__(
        self,
        script: Iterable[FakeResponse] = (),
        *,
        responder: Responder | None = None,
        model: str = "fake-model",
        api_key: str | None = None,
        lifetime: float = 60.0,
        port: int = 0,
    ) -> None:
        self.model = model
        self.api_key = api_key
        self.lifetime = lifetime
        self.responder = responder
        self.requests: list[FakeRequest] = []
        self._script: list[FakeResponse] = list(script)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ids = itertools.count(1)
        self._port = port
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._bound: int | None = None
        self._wake: tuple[int, int] | None = None  # a pipe that wakes the serving thread at once on stop

    # -- what each API looks like ---------------------------------------------

    def invalid(self, body: Any) -> str | None:
        """Why a real server would refuse this request body, or None."""
        if not isinstance(body, dict):
            return "the body is not a JSON object"
        if not isinstance(body.get("model"), str) or not body["model"]:
            return "'model' is required"
        return self.check(body)

    def check(self, body: dict[str, Any]) -> str | None:
        """The API's own checks of a JSON object body that names a model."""
        raise NotImplementedError

    def answer(self, body: dict[str, Any], reply: FakeResponse, number: int) -> dict[str, Any]:
        """The 200 answer document for a scripted reply."""
        raise NotImplementedError

    def error_doc(self, status: int, message: str, type: str | None, code: str | None = None) -> Any:
        """The error document for HTTP `status`."""
        raise NotImplementedError

    def authorized(self, headers: Mapping[str, str]) -> bool:
        """Whether the request carries the key (always, when no `api_key` is set)."""
        raise NotImplementedError

    def models_doc(self) -> Any:
        return {"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": "fake"}]}

    # -- lifecycle --------------------------------------------------------------

    def start(self) -> Any:
        """Bind to 127.0.0.1 and serve in a background thread."""
        if self._httpd is not None:
            raise RuntimeError("the fake server is already started")
        handler = type("_BoundHandler", (_Handler,), {"fake": self})
        httpd = ThreadingHTTPServer(("127.0.0.1", self._port), handler)
        httpd.daemon_threads = False  # server_close() joins every handler thread
        self._httpd = httpd
        self._bound = int(httpd.server_address[1])
        self._wake = os.pipe()
        self._thread = threading.Thread(target=self._serve, name=self.thread_name, daemon=True)
        self._thread.start()
        return self

    def _serve(self) -> None:
        assert self._httpd is not None and self._wake is not None
        deadline = time.monotonic() + self.lifetime
        with selectors.DefaultSelector() as selector:
            selector.register(self._httpd, selectors.EVENT_READ)
            selector.register(self._wake[0], selectors.EVENT_READ)
            while not self._stop.is_set() and (left := deadline - time.monotonic()) > 0:
                ready = {key.fd for key, _ in selector.select(left)}
                if self._httpd.fileno() in ready and not self._stop.is_set():
                    self._httpd.handle_request()  # a connection waits: accepted without blocking
        self._stop.set()

    def stop(self) -> None:
        """Stop serving, close the socket and wait for every handler thread."""
        self._stop.set()
        if self._wake is not None:
            os.write(self._wake[1], b"x")
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._httpd is not None:
            self._httpd.server_close()
            self._httpd = None
        if self._wake is not None:
            for fd in self._wake:
                os.close(fd)
            self._wake = None

    def wait(self) -> None:
        """Block until the server stops (its lifetime ends) or Ctrl-C."""
        try:
            while self._thread is not None and self._thread.is_alive():
                self._thread.join(0.2)
        except KeyboardInterrupt:
            pass

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        """What the client's base URL should be: `http://127.0.0.1:PORT` and the API's base path."""
        return f"http://127.0.0.1:{self.port}{self.base_path}"

    @property
    def port(self) -> int:
        """The port it listens on (still known after `stop`, for assertions)."""
        if self._bound is None:
            raise RuntimeError("the fake server was never started")
        return self._bound

    # -- script -----------------------------------------------------------------

    def add(self, *responses: FakeResponse) -> None:
        """Append answers to the script."""
        with self._lock:
            self._script.extend(responses)

    @property
    def remaining(self) -> int:
        """Scripted answers not given yet."""
        with self._lock:
            return len(self._script)

    def _api_requests(self) -> list[FakeRequest]:
        with self._lock:
            return [r for r in self.requests if r.path.rstrip("/").endswith(self.route)]

    def _record(self, request: FakeRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def _next(self, body: dict[str, Any]) -> FakeResponse:
        with self._lock:
            if self._script:
                return self._script.pop(0)
        if self.responder is not None:
            return self.responder(body)
        return FakeResponse.error(400, "fake server: script exhausted", type="fake_script_exhausted")

    def _reply(self, body: dict[str, Any]) -> tuple[int, Any, FakeResponse]:
        reply = self._next(body)
        if reply.status == 200:
            return 200, reply.edited(self.answer(body, reply, next(self._ids))), reply
        err = reply.error_body or {}
        doc = self.error_doc(reply.status, str(err.get("message")), err.get("type"), err.get("code"))
        return reply.status, doc, reply

    def _wait(self, seconds: float) -> None:
        if seconds > 0:
            self._stop.wait(seconds)


class _Handler(BaseHTTPRequestHandler):
    fake: FakeServer
    timeout = 5  # a client that sends nothing for this long is dropped
    protocol_version = "HTTP/1.0"  # one answer per connection: nothing idles on shutdown

    def log_message(self, format: str, *args: Any) -> None:
        pass  # tests read `requests`, not stderr

    def do_GET(self) -> None:
        if not self._authorized(None):
            return
        if self.path.rstrip("/").endswith("/models"):
            self._answer(200, self.fake.models_doc(), None)
        else:
            self._answer(404, self.fake.error_doc(404, f"no route {self.path}", "not_found_error"), None)

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        if not self._authorized(body):
            return
        if not self.path.rstrip("/").endswith(self.fake.route):
            self._answer(404, self.fake.error_doc(404, f"no route {self.path}", "not_found_error"), body)
            return
        problem = self.fake.invalid(body)
        if problem is not None:
            self._answer(400, self.fake.error_doc(400, problem, "invalid_request_error"), body)
            return
        status, doc, reply = self.fake._reply(body)
        self._answer(status, doc, body, reply.headers, reply.delay, reply.body, reply.drip)

    def _authorized(self, body: Any) -> bool:
        if self.fake.api_key is None or self.fake.authorized({k.lower(): v for k, v in self.headers.items()}):
            return True
        doc = self.fake.error_doc(401, self.fake.auth_message, None, "invalid_api_key")
        self._answer(401, doc, body)
        return False

    def _answer(
        self,
        status: int,
        doc: Any,
        body: Any,
        headers: Iterable[tuple[str, str]] = (),
        delay: float = 0.0,
        raw: bytes | None = None,
        drip: float = 0.0,
    ) -> None:
        # Recorded on arrival, so a slow answer a client gave up on keeps its place.
        self.fake._record(
            FakeRequest(
                method=self.command,
                path=self.path,
                headers={k.lower(): v for k, v in self.headers.items()},
                body=body,
                status=status,
            )
        )
        self.fake._wait(delay)
        data = json.dumps(doc).encode() if raw is None else raw
        headers = list(headers)
        try:
            self.send_response(status)
            if not any(name.lower() == "content-type" for name, _ in headers):
                self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            if drip > 0:
                self._drip(data, drip)
            else:
                self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout test): nothing to tell it

    def _drip(self, data: bytes, seconds: float) -> None:
        """Send `data` one byte every `seconds`: each read succeeds, the whole answer crawls."""
        for i in range(len(data)):
            self.wfile.write(data[i : i + 1])
            if self.fake._stop.wait(seconds):
                return  # the server stops: a dripping answer is cut short
