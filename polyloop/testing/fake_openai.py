"""A small OpenAI-compatible chat-completions server for tests, on 127.0.0.1.

It speaks just enough of `POST /v1/chat/completions` for a real client (the
official `openai` package, or `polyloop.openai.OpenAIModel`) to talk to it
over a real socket: scripted answers (tool calls and final answers) with
usage, scripted failures (429, 5xx, 401, slow answers for timeouts), and a
record of every request it got so a test can assert on what was sent::

    from polyloop.testing.fake_openai import FakeOpenAIServer, FakeResponse

    with FakeOpenAIServer([
        FakeResponse.error(429, retry_after=0),
        FakeResponse.tool_call("read_file", {"path": "notes.txt"}),
        FakeResponse.final("done"),
    ]) as server:
        model = OpenAIModel(base_url=server.base_url, api_key="test", model="fake")
        ...
        assert len(server.chat_requests) == 3

The server needs nothing beyond the standard library. It is bounded and
stops by itself: it serves at most `lifetime` seconds, closes every
connection after one answer, gives up on a client that sends nothing for a
few seconds, and cuts scripted delays short when it stops. Use it as a
context manager (or call `stop()`), so its socket and threads are closed.

Run it by hand to try an OpenAI-compatible agent without a network or a
key (it answers every request with the final answer given, or plays a
JSONL script of `FakeResponse` objects)::

    python -m polyloop.testing.fake_openai --final "hello" --lifetime 300
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeOpenAIServer", "FakeRequest", "FakeResponse"]


@dataclass(frozen=True, slots=True)
class FakeResponse:
    """One scripted answer of the fake server.

    Build one with `tool_call`, `final` or `error`. Every kind may carry a
    `delay` in seconds before the server answers (for timeout tests).

    Attributes:
        status: the HTTP status (200 for a completion).
        text: the assistant message's `content`.
        tool_calls: `(name, arguments)` pairs; arguments given as a dict are
            sent as JSON, a str is sent as is (to test malformed JSON).
        usage: `(prompt_tokens, completion_tokens)`; None computes a
            deterministic estimate from the request and the answer, and
            `False` leaves `usage` out of the answer.
        error_body: for a non-200 status, the OpenAI-style error object.
        headers: extra response headers (e.g. `retry-after`).
        delay: seconds to wait before answering.
        finish_reason: overrides the computed `finish_reason`.
    """

    status: int = 200
    text: str | None = None
    tool_calls: tuple[tuple[str, dict[str, Any] | str], ...] = ()
    usage: tuple[int, int] | None | bool = None
    error_body: dict[str, Any] | None = None
    headers: tuple[tuple[str, str], ...] = ()
    delay: float = 0.0
    finish_reason: str | None = None

    @classmethod
    def tool_call(
        cls,
        name: str,
        args: Mapping[str, Any] | str | None = None,
        *,
        text: str | None = None,
        usage: tuple[int, int] | None | bool = None,
        delay: float = 0.0,
        more: Iterable[tuple[str, Mapping[str, Any] | str]] = (),
    ) -> FakeResponse:
        """An answer that calls tool `name` with `args` (`more` adds further calls)."""
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
        """A failed request: HTTP `status` with an OpenAI-style error body.

        `retry_after` adds a `retry-after` header (seconds).
        """
        kinds = {400: "invalid_request_error", 401: "invalid_request_error", 429: "rate_limit_error"}
        body = {
            "message": message or f"fake server: scripted HTTP {status}",
            "type": type or kinds.get(status, "server_error"),
            "param": None,
            "code": code,
        }
        headers = () if retry_after is None else (("retry-after", f"{retry_after:g}"),)
        return cls(status=status, error_body=body, headers=headers, delay=delay)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> FakeResponse:
        """Read `{"tool": NAME, "args": {...}}`, `{"final": TEXT}` or `{"error": STATUS}`.

        The same shapes `ScriptedModel` reads, plus `error`; each may carry
        `text`, `usage` (`{"input_tokens", "output_tokens"}`) and `delay`.
        """
        usage = obj.get("usage")
        pair = None if usage is None else (int(usage["input_tokens"]), int(usage["output_tokens"]))
        delay = float(obj.get("delay", 0.0))
        if "tool" in obj:
            return cls.tool_call(str(obj["tool"]), obj.get("args") or {}, text=obj.get("text"), usage=pair, delay=delay)
        if "final" in obj:
            return cls.final(str(obj["final"]), usage=pair, delay=delay)
        if "error" in obj:
            return cls.error(int(obj["error"]), obj.get("message"), delay=delay)
        raise ValueError(f"expected 'tool', 'final' or 'error' in {dict(obj)!r}")


@dataclass(frozen=True, slots=True)
class FakeRequest:
    """One request the server received.

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
        """The chat messages the request carried."""
        return list((self.body or {}).get("messages") or [])

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The tool definitions the request carried."""
        return list((self.body or {}).get("tools") or [])


Responder = Callable[[dict[str, Any]], FakeResponse]


class FakeOpenAIServer:
    """An OpenAI-compatible chat-completions server on 127.0.0.1, for tests.

    Answers `POST /v1/chat/completions` with the next scripted
    `FakeResponse` (or, once the script is used up, with `responder(body)`
    if one is given, else HTTP 400 "script exhausted"), and `GET /v1/models`
    with the one model it serves. Requests are checked the way a real server
    checks them (a model, a message list, every `tool` message answering an
    earlier assistant `tool_calls` id, every tool a `function` with a name)
    and rejected with HTTP 400 otherwise.

    Args:
        script: the answers to give, in order.
        responder: answers requests once the script is used up.
        model: the model name it reports.
        api_key: when set, requests must carry `Authorization: Bearer <key>`
            or get HTTP 401.
        lifetime: seconds after which the server stops by itself.
        port: the port to listen on (0 picks a free one).
    """

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

    # -- lifecycle --------------------------------------------------------------

    def start(self) -> FakeOpenAIServer:
        """Bind to 127.0.0.1 and serve in a background thread."""
        if self._httpd is not None:
            raise RuntimeError("the fake server is already started")
        handler = type("_Handler", (_Handler,), {"fake": self})
        httpd = ThreadingHTTPServer(("127.0.0.1", self._port), handler)
        httpd.daemon_threads = False  # server_close() joins every handler thread
        httpd.timeout = 0.05
        self._httpd = httpd
        self._bound = int(httpd.server_address[1])
        self._thread = threading.Thread(target=self._serve, name="fake-openai", daemon=True)
        self._thread.start()
        return self

    def _serve(self) -> None:
        assert self._httpd is not None
        deadline = time.monotonic() + self.lifetime
        while not self._stop.is_set() and time.monotonic() < deadline:
            self._httpd.handle_request()
        self._stop.set()

    def stop(self) -> None:
        """Stop serving, close the socket and wait for every handler thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._httpd is not None:
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The port it listens on (still known after `stop`, for assertions)."""
        if self._bound is None:
            raise RuntimeError("the fake server was never started")
        return self._bound

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:PORT/v1`: what `OPENAI_BASE_URL` should be."""
        return f"http://127.0.0.1:{self.port}/v1"

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

    @property
    def chat_requests(self) -> list[FakeRequest]:
        """The chat-completions requests received, in order."""
        with self._lock:
            return [r for r in self.requests if r.path.rstrip("/").endswith("/chat/completions")]

    # -- answering --------------------------------------------------------------

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

    def _wait(self, seconds: float) -> None:
        if seconds > 0:
            self._stop.wait(seconds)

    def _completion(self, body: dict[str, Any], reply: FakeResponse) -> dict[str, Any]:
        number = next(self._ids)
        calls = [
            {
                "id": f"call_{number}_{i}",
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                },
            }
            for i, (name, args) in enumerate(reply.tool_calls)
        ]
        message: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if calls:
            message["tool_calls"] = calls
        doc: dict[str, Any] = {
            "id": f"chatcmpl-fake-{number}",
            "object": "chat.completion",
            "created": 1_700_000_000 + number,
            "model": body.get("model") or self.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": reply.finish_reason or ("tool_calls" if calls else "stop"),
                    "logprobs": None,
                }
            ],
        }
        if reply.usage is not False:
            if isinstance(reply.usage, tuple):
                prompt, completion = reply.usage
            else:
                prompt = max(1, len(json.dumps(body.get("messages"))) // 4)
                completion = max(1, len(json.dumps(message)) // 4)
            doc["usage"] = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            }
        return doc


def _invalid(body: Any) -> str | None:
    """Why a chat-completions request would be refused by a real server, or None."""
    if not isinstance(body, dict):
        return "the body is not a JSON object"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "'model' is required"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "'messages' must be a non-empty array"
    open_ids: set[str] = set()
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role not in ("system", "developer", "user", "assistant", "tool"):
            return f"messages[{i}]: unknown role {role!r}"
        if role == "assistant":
            for call in m.get("tool_calls") or []:
                fn = call.get("function") or {}
                if call.get("type") != "function" or not isinstance(call.get("id"), str):
                    return f"messages[{i}].tool_calls: each call needs an id and type 'function'"
                if not isinstance(fn.get("name"), str) or not isinstance(fn.get("arguments"), str):
                    return f"messages[{i}].tool_calls: function needs a name and string arguments"
                open_ids.add(call["id"])
            if m.get("content") is None and not m.get("tool_calls"):
                return f"messages[{i}]: an assistant message needs content or tool_calls"
        elif role == "tool":
            if m.get("tool_call_id") not in open_ids:
                return (
                    f"messages[{i}]: messages with role 'tool' must be a response to a "
                    "preceding message with 'tool_calls'"
                )
            if not isinstance(m.get("content"), str):
                return f"messages[{i}]: tool content must be a string"
        elif not isinstance(m.get("content"), str):
            return f"messages[{i}]: content must be a string"
    for i, t in enumerate(body.get("tools") or []):
        fn = t.get("function") if isinstance(t, dict) else None
        if t.get("type") != "function" or not isinstance(fn, dict) or not fn.get("name"):
            return f"tools[{i}]: expected {{'type': 'function', 'function': {{'name', ...}}}}"
    return None


class _Handler(BaseHTTPRequestHandler):
    fake: FakeOpenAIServer
    timeout = 5  # a client that sends nothing for this long is dropped
    protocol_version = "HTTP/1.0"  # one answer per connection: nothing idles on shutdown

    def log_message(self, format: str, *args: Any) -> None:
        pass  # tests read `requests`, not stderr

    def do_GET(self) -> None:
        if not self._authorized(None):
            return
        if self.path.rstrip("/").endswith("/models"):
            models = {"object": "list", "data": [{"id": self.fake.model, "object": "model", "owned_by": "fake"}]}
            self._answer(200, models, None)
        else:
            self._answer(404, _error_body(f"no route {self.path}", "not_found"), None)

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        if not self._authorized(body):
            return
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._answer(404, _error_body(f"no route {self.path}", "not_found"), body)
            return
        problem = _invalid(body)
        if problem is not None:
            self._answer(400, _error_body(problem, "invalid_request_error"), body)
            return
        reply = self.fake._next(body)
        if reply.status != 200:
            doc = {"error": reply.error_body}
        else:
            doc = self.fake._completion(body, reply)
        self._answer(reply.status, doc, body, reply.headers, reply.delay)

    def _authorized(self, body: Any) -> bool:
        key = self.fake.api_key
        if key is None or self.headers.get("authorization") == f"Bearer {key}":
            return True
        error = _error_body("Incorrect API key provided.", "invalid_request_error", code="invalid_api_key")
        self._answer(401, error, body)
        return False

    def _answer(
        self,
        status: int,
        doc: Any,
        body: Any,
        headers: Iterable[tuple[str, str]] = (),
        delay: float = 0.0,
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
        data = json.dumps(doc).encode()
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout test): nothing to tell it


def _error_body(message: str, type: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": None, "code": code}}


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m polyloop.testing.fake_openai",
        description="Serve a scripted OpenAI-compatible chat-completions API on 127.0.0.1.",
    )
    parser.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    parser.add_argument("--script", help="a JSONL file of answers ({'tool','args'} / {'final'} / {'error'})")
    parser.add_argument("--final", default=None, help="answer every request left with this final text")
    parser.add_argument("--model", default="fake-model")
    parser.add_argument("--lifetime", type=float, default=300.0, help="stop after this many seconds")
    args = parser.parse_args(argv)
    script: list[FakeResponse] = []
    if args.script:
        with open(args.script, encoding="utf-8") as fh:
            script = [FakeResponse.from_json(json.loads(line)) for line in fh if line.strip()]
    responder = None if args.final is None else (lambda body: FakeResponse.final(args.final))
    server = FakeOpenAIServer(script, responder=responder, model=args.model, lifetime=args.lifetime, port=args.port)
    with server:
        print(f"OPENAI_BASE_URL={server.base_url}", flush=True)
        print(f"POLYLOOP_MODEL={server.model}", flush=True)
        print(f"serving for {args.lifetime:g}s; Ctrl-C stops", file=sys.stderr, flush=True)
        try:
            while server._thread is not None and server._thread.is_alive():
                server._thread.join(0.2)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
