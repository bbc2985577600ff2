"""A real loopback HTTP server answering what a test scripts: any status, content type, body.

It plays the upstreams that misbehave in ways the fake model never does: a tool server
whose error page lists the request headers, a gateway answering HTML or plain JSON to a
streaming request, a provider whose 401 quotes the API key.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable
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
    headers: tuple[tuple[str, str], ...] = ()
    """More response headers (a redirect's ``location``)."""


def echo_headers(status: int) -> Callable[[Request], Answer]:
    """Answer ``status`` with a plain-text page listing every request header, as some
    frameworks' debug error pages do."""

    def respond(request: Request) -> Answer:
        lines = [f"{request.method} {request.path} failed; request headers:"]
        lines += [f"{name}: {value}" for name, value in sorted(request.headers.items())]
        return Answer(status, "\n".join(lines), "text/plain")

    return respond


def serve(
    respond: Callable[[Request], Answer], *, protocol_version: str = "HTTP/1.0"
) -> ThreadingHTTPServer:
    """Serve ``respond`` on a free loopback port from a daemon thread, every method alike.

    Args:
        respond: What to send back for each request as received.
        protocol_version: ``HTTP/1.1`` keeps connections alive, as real upstreams do.

    Returns:
        The running server; the caller shuts it down (``shutdown``, then ``server_close``).
    """

    class Handler(BaseHTTPRequestHandler):
        def _handle(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            request = Request(
                self.command,
                self.path,
                {k.lower(): v for k, v in self.headers.items()},
                self.rfile.read(length) if length else b"",
            )
            answer = respond(request)
            data = answer.body.encode() if isinstance(answer.body, str) else answer.body
            try:
                self.send_response(answer.status)
                self.send_header("content-type", answer.content_type)
                self.send_header("content-length", str(len(data)))
                for name, value in answer.headers:
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                # The client is gone (it gave up on an oversized body, or its worker was
                # killed): nobody to answer.
                pass

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

        def log_message(self, format: str, *args: Any) -> None:
            pass

    Handler.protocol_version = protocol_version
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def url_of(server: ThreadingHTTPServer) -> str:
    """``http://127.0.0.1:<port>`` of a server ``serve`` started."""
    host, port = server.server_address[:2]
    return f"http://{host!s}:{port}"


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
        return url_of(self._server)

    def __enter__(self) -> Upstream:
        def answer(request: Request) -> Answer:
            self.requests.append(request)
            return self.respond(request)

        self._server = serve(answer, protocol_version="HTTP/1.1")
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


@contextlib.asynccontextmanager
async def dripping(*, head: bool = False) -> AsyncIterator[str]:
    """The base URL of a server on loopback whose every answer is 100 bytes of JSON sent a
    byte every 0.1 s: each read is quick, the whole takes 10 s (what a per-read timeout
    never stops). ``head``: the status line and headers drip too, a byte every 0.1 s (a
    client that reads only the status still waits)."""
    start = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"

    async def drip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        if not head:
            writer.write(start)
        try:
            for byte in [start[i : i + 1] for i in range(len(start))] if head else []:
                writer.write(byte)
                await writer.drain()
                await asyncio.sleep(0.1)
            for _ in range(100):
                writer.write(b" ")
                await writer.drain()
                await asyncio.sleep(0.1)
        except ConnectionError:
            pass
        writer.close()

    server = await asyncio.start_server(drip, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
