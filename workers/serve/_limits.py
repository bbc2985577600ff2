"""Request bodies are bounded, and read only by the route they are for.

``BodyLimit`` is an ASGI middleware, so it holds for every route and for an app mounted in
another:

- A request's bound is the app's ``max_bytes``, or a smaller one for the routes that take
  small bodies (``RouteBound``, matched on the path under the app; ``create_app`` gives
  them: ``SMALL_BODY_BYTES``).
- A declared ``Content-Length`` over the bound is a 413 problem before anything is read.
- Otherwise the body is passed to the app as it arrives, never buffered here, and counted:
  once it passes the bound the 413 is sent, and the app's reading ends (it is told the
  client left; what it would still send is dropped). A route that checks its credential
  before it reads (a header) thus refuses an unauthenticated request unread.
- An answer sent before the request's body was all received (a 413, or a route's refusal
  before reading) carries ``Connection: close``, and the rest of the body is read and
  thrown away, at most ``LINGER_BYTES`` within ``LINGER_SECONDS``, before the answer ends:
  an HTTP/1.1 client sends its whole body before it reads the answer, and a server that
  closes a connection with bytes still unread resets it (TCP RST), which loses the answer
  in the client's buffer. A client that sends more than that is cut off all the same.
  A client waiting for ``100 Continue`` is never asked for its body.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from psych_runtime.workers.serve._problems import PROBLEM_JSON, problem_type

SMALL_BODY_BYTES = 256 * 1024
"""The bound of routes that take a few fields and a person's text (a Run's approve, deny,
answer, abort and steer) or a peer's push (a task's state): far below the app's bound,
which makes room for a Spec document."""

LINGER_BYTES = 4 * 1024 * 1024
"""The most of a refused body's rest read (and thrown away) so its client gets the answer."""

LINGER_SECONDS = 5.0
"""How long the rest of a refused body is read at most."""

_BODILESS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True)
class RouteBound:
    """A smaller bound for the routes whose path under the app matches ``path``."""

    path: re.Pattern[str]
    max_bytes: int


class BodyLimit:
    """The middleware (see the module docstring)."""

    def __init__(self, app: ASGIApp, max_bytes: int, routes: Sequence[RouteBound] = ()) -> None:
        if max_bytes < 1:
            raise ValueError(f"max_body_bytes must be at least 1, not {max_bytes}")
        self.app = app
        self.max_bytes = max_bytes
        self.routes = tuple(routes)

    def bound(self, scope: Scope) -> int:
        """The bound of this request's body."""
        path = route_path(scope)
        for route in self.routes:
            if route.path.fullmatch(path):
                return min(route.max_bytes, self.max_bytes)
        return self.max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in _BODILESS:
            await self.app(scope, receive, send)
            return
        await _Exchange(scope, receive, send, self.bound(scope)).run(self.app)


def route_path(scope: Scope) -> str:
    """The request's path under the app (without the path the app is mounted at)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root) and path[len(root) : len(root) + 1] in ("", "/"):
        return path[len(root) :]
    return path


class _Exchange:
    """One request's body, counted as the app reads it, and its answer."""

    def __init__(self, scope: Scope, receive: Receive, send: Send, bound: int) -> None:
        self.scope, self.receive, self.send, self.bound = scope, receive, send, bound
        headers = dict(scope.get("headers", ()))
        self.declared = _content_length(headers.get(b"content-length"))
        chunked = b"chunked" in headers.get(b"transfer-encoding", b"").lower()
        self.received = 0
        self.complete = self.declared == 0 or (self.declared is None and not chunked)
        """Whether the whole body has been received."""
        self.continuing = headers.get(b"expect", b"").lower() == b"100-continue"
        """Whether the client waits for ``100 Continue`` before it sends its body (until
        the body is first asked for, which makes the server send it)."""
        self.over = False
        """Whether the body passed the bound: the app reads no more of it."""
        self.refused = False
        """Whether the 413 was sent: the app's answer is dropped."""
        self.started = False

    async def run(self, app: ASGIApp) -> None:
        if self.declared is not None and self.declared > self.bound:
            await self.refuse(f"the body declares {self.declared} bytes")
            return
        try:
            await app(self.scope, self.read, self.answer)
        except ClientDisconnect:
            if not self.refused:
                raise
            # The disconnect this middleware told the app of, once it had answered 413:
            # a route that let it through has nothing left to answer.

    async def read(self) -> Message:
        """The app's ``receive``: the body as it arrives, until it passes the bound."""
        if self.over:
            return {"type": "http.disconnect"}
        message = await self.receive()
        self.continuing = False
        if message["type"] == "http.request":
            self.received += len(message.get("body", b""))
            if not message.get("more_body", False):
                self.complete = True
            if self.received > self.bound:
                await self.refuse(f"the body is over {self.bound} bytes")
                return {"type": "http.disconnect"}
        return message

    async def answer(self, message: Message) -> None:
        """The app's ``send``: dropped once refused; an answer sent before the body was
        all received closes the connection, once the body's rest was read."""
        if self.refused:
            return
        if message["type"] == "http.response.start":
            self.started = True
            if not self.complete:
                headers = [
                    (k, v) for k, v in message.get("headers", ()) if k.lower() != b"connection"
                ]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
        elif (
            message["type"] == "http.response.body"
            and not message.get("more_body", False)
            and not self.complete
        ):
            await self.send({**message, "more_body": True})
            await self.linger()
            await self.send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        await self.send(message)

    async def refuse(self, why: str) -> None:
        """Answer 413 (unless the app already started answering: then it reads no more)."""
        self.over = True
        if self.started:
            return
        self.refused = True
        body = json.dumps(
            {
                "type": problem_type(413, "too-large"),
                "title": "Request too large",
                "status": 413,
                "detail": f"{why}; at most {self.bound} bytes are accepted",
                "max_bytes": self.bound,
            }
        ).encode()
        await self.send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", PROBLEM_JSON.encode()),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await self.send({"type": "http.response.body", "body": body, "more_body": True})
        await self.linger()
        await self.send({"type": "http.response.body", "body": b"", "more_body": False})

    async def linger(self) -> None:
        """Read and throw away the body's rest (see the module docstring)."""
        if self.continuing:
            return  # the client has sent nothing, and waits for this answer
        deadline = asyncio.get_running_loop().time() + LINGER_SECONDS
        thrown = 0
        try:
            async with asyncio.timeout_at(deadline):
                while not self.complete and thrown <= LINGER_BYTES:
                    message = await self.receive()
                    if message["type"] != "http.request":
                        return  # the client left
                    thrown += len(message.get("body", b""))
                    self.complete = not message.get("more_body", False)
        except TimeoutError:
            return


def _content_length(value: bytes | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None
