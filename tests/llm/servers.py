"""Local stand-ins for the OpenAI Chat Completions and Anthropic Messages APIs, for the real SDKs
to talk to. Each request takes the next queued step (a reply, an HTTP error, a hang or a delay);
with none queued the server replies normally. Every request is kept for the test to inspect."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

FENCED_REPLY = "Here is the kernel.\n```python\nclass ModelNew:\n    pass\n```\n"


@dataclass
class Step:
    kind: str  # "ok", "error", "hang", "delay"
    text: str = FENCED_REPLY
    input_tokens: int | None = 120
    output_tokens: int | None = 45
    status: int = 200
    message: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)  # merged into the JSON reply


def ok(text: str = FENCED_REPLY, input_tokens: int | None = 120, output_tokens: int | None = 45,
       **extra: Any) -> Step:
    return Step("ok", text=text, input_tokens=input_tokens, output_tokens=output_tokens, extra=extra)


def error(status: int, message: str = "boom", headers: dict[str, str] | None = None) -> Step:
    return Step("error", status=status, message=message, headers=headers or {})


def hang(seconds: float = 5.0) -> Step:
    """Say nothing for `seconds` (or until the server stops)."""
    return Step("hang", seconds=seconds)


def delay(seconds: float, text: str = FENCED_REPLY) -> Step:
    """Reply normally after `seconds`."""
    return Step("delay", seconds=seconds, text=text)


@dataclass
class Received:
    path: str
    headers: dict[str, str]  # lower-case names
    body: dict[str, Any]


class FakeServer:
    path = "/"

    def __init__(self) -> None:
        self.steps: deque[Step] = deque()
        self.received: list[Received] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02},
                                        daemon=True)

    @property
    def root(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def queue(self, *steps: Step) -> Self:
        self.steps.extend(steps)
        return self

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()  # releases hanging handlers
        self._httpd.shutdown()
        self._httpd.server_close()

    # What each API calls things.
    def reply_body(self, request: dict[str, Any], step: Step) -> dict[str, Any]:
        raise NotImplementedError

    def error_body(self, step: Step) -> dict[str, Any]:
        raise NotImplementedError

    def _next_step(self) -> Step:
        with self._lock:
            return self.steps.popleft() if self.steps else ok()

    def handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("content-length") or 0)
        body = json.loads(handler.rfile.read(length) or b"{}")
        headers = {k.lower(): v for k, v in handler.headers.items()}
        with self._lock:
            self.received.append(Received(handler.path, headers, body))
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            self._respond(handler, body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout test)
        finally:
            with self._lock:
                self.in_flight -= 1

    def _respond(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        if handler.path.rstrip("/") != self.path:
            return _send(handler, 404, {"error": {"message": f"no route {handler.path}"}})
        step = self._next_step()
        if step.kind == "hang":
            self._stop.wait(step.seconds)
            return _send(handler, 200, self.reply_body(body, ok()))
        if step.kind == "delay":
            time.sleep(step.seconds)
        if step.kind == "error":
            return _send(handler, step.status, self.error_body(step), step.headers)
        _send(handler, 200, self.reply_body(body, step))


def _send(handler: BaseHTTPRequestHandler, status: int, payload: dict[str, Any],
          headers: dict[str, str] | None = None) -> None:
    data = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(data)))
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(data)


def _handler_for(server: FakeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            server.handle(self)

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

    return Handler


class OpenAIServer(FakeServer):
    """POST /v1/chat/completions. The SDK's base_url is `.url`."""

    path = "/v1/chat/completions"

    @property
    def url(self) -> str:
        return self.root + "/v1"

    def reply_body(self, request: dict[str, Any], step: Step) -> dict[str, Any]:
        usage = None
        if step.input_tokens is not None:
            usage = {"prompt_tokens": step.input_tokens, "completion_tokens": step.output_tokens,
                     "total_tokens": step.input_tokens + (step.output_tokens or 0)}
        body = {
            "id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()),
            "model": request.get("model", "?"),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": step.text}}],
            "usage": usage,
        }
        return {**body, **step.extra}

    def error_body(self, step: Step) -> dict[str, Any]:
        return {"error": {"message": step.message, "type": "test_error", "code": str(step.status)}}


class AnthropicServer(FakeServer):
    """POST /v1/messages. The SDK's base_url is `.url` (the SDK adds /v1/messages)."""

    path = "/v1/messages"

    @property
    def url(self) -> str:
        return self.root

    def reply_body(self, request: dict[str, Any], step: Step) -> dict[str, Any]:
        body = {
            "id": "msg_test", "type": "message", "role": "assistant", "model": request.get("model", "?"),
            "content": [{"type": "text", "text": step.text}],
            "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": step.input_tokens or 0, "output_tokens": step.output_tokens or 0},
        }
        return {**body, **step.extra}

    def error_body(self, step: Step) -> dict[str, Any]:
        kinds = {429: "rate_limit_error", 400: "invalid_request_error", 401: "authentication_error"}
        return {"type": "error", "error": {"type": kinds.get(step.status, "api_error"), "message": step.message}}
