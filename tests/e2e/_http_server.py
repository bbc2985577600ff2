"""A real loopback HTTP server (``tests._upstream.serve``) that records and counts every
request it receives."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any

from tests._upstream import Answer, Request, serve, url_of


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: str


@dataclass
class CountingServer:
    """Answers every request with ``respond(seen) -> (status, body)``; remembers them all."""

    respond: Callable[[Seen], tuple[int, str]] = lambda seen: (200, json.dumps({"ok": True}))
    delay: float = 0.0
    seen: list[Seen] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return url_of(self._server)

    def count(self, method: str, path: str) -> int:
        return sum(1 for s in self.seen if s.method == method and s.path == path)

    def start(self) -> CountingServer:
        def answer(request: Request) -> Answer:
            seen = Seen(request.method, request.path, request.headers, request.body.decode())
            self.seen.append(seen)
            if self.delay:
                time.sleep(self.delay)
            status, text = self.respond(seen)
            return Answer(status, text)

        self._server = serve(answer)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def refund_tool(base_url: str) -> dict[str, Any]:
    """The keyword arguments of the suites' ``refund`` HTTP tool, for
    ``builder.http_tool("refund", **refund_tool(api.url))``: a POST to
    ``<base_url>/orders/{order_id}/refund``."""
    return {
        "description": "Refund an order.",
        "url": base_url + "/orders/{order_id}/refund",
        "method": "POST",
    }
