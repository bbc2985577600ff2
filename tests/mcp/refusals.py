"""MCP messages the test server refuses on request (``POST /control/refuse``): a POST whose
JSON-RPC method was named is answered 503 (or the status asked, with a ``Location`` when
one was given: a redirect) unread by the MCP app, as a server failing that request alone (a
listing's POST after the session connected, say)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.responses import JSONResponse

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


async def refused(
    scope: MutableMapping[str, Any],
    receive: Receive,
    send: Send,
    methods: set[str],
    status: int = 503,
    location: str | None = None,
) -> Receive | None:
    """Read a POST's body; when its method is in ``methods``, answer ``status`` (with
    ``location`` as its ``Location`` when given) and return None, else return a
    ``receive`` that gives the app the body read."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(bytes(message.get("body", b"")))
        if not message.get("more_body", False):
            break
    body = b"".join(chunks)
    try:
        method = json.loads(body).get("method")
    except (ValueError, AttributeError):
        method = None
    if method in methods:
        headers = {} if location is None else {"location": location}
        answer = JSONResponse(
            {"error": f"{method} refused by the test"}, status_code=status, headers=headers
        )
        await answer(scope, receive, send)
        return None
    return replaying(body, receive)


def replaying(body: bytes, receive: Receive) -> Receive:
    """``receive`` with ``body``, already read, given again first."""
    given = False

    async def replay() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay
