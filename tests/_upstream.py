"""A real loopback HTTP server answering what a test scripts: any status, content type, body.

It plays the upstreams that misbehave in ways the fake model never does: a tool server
whose error page lists the request headers, a gateway answering HTML or plain JSON to a
streaming request, a provider whose 401 quotes the API key.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any


@dataclass(frozen=True)
class Request:
    """One request as received."""

    method: str
    path: str
    """The path and query, as sent."""
    headers: dict[str, str]
    """Lower-cased names."""
    body: bytes


@dataclass(frozen=True)
class Answer:
    """What the server sends back."""

    status: int
    body: bytes | str = b""
    content_type: str = "application/json"


def echo_headers(status: int) -> Callable[[Request], Answer]:
    """Answer ``status`` with a plain-text page listing every request header, as some
    frameworks' debug error pages do."""

    def respond(request: Request) -> Answer:
        lines = [f"{request.method} {request.path} failed; request headers:"]
        lines += [f"{name}: {value}" for name, value in sorted(request.headers.items())]
        return Answer(status, "\n".join(lines), "text/plain")

    return respond


@dataclass
class Upstream:
    """Answers each request with ``respond(request)``; remembers every request."""

    respond: Callable[[Request], Answer]
    requests: list[Request] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> Upstream:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                request = Request(
                    self.command,
                    self.path,
                    {k.lower(): v for k, v in self.headers.items()},
                    self.rfile.read(length) if length else b"",
                )
                owner.requests.append(request)
                answer = owner.respond(request)
                data = answer.body.encode() if isinstance(answer.body, str) else answer.body
                try:
                    self.send_response(answer.status)
                    self.send_header("content-type", answer.content_type)
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a refused oversized body): nobody to answer

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()
