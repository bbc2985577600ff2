"""Whether a request that failed had left: ``never_sent`` reads it from the failure, for an
activity that must not claim a call not safe to repeat ran when it provably did not (its
connection refused or never made), nor that it did not when it may have (its redirect
refused: the request before it was sent and answered). An MCP session's requests fail in
the SDK's own tasks, which end the session saying only "Connection closed": ``attempts``
records what became of each, for the call that asked."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import Context, ContextVar, copy_context
from dataclasses import dataclass

import httpx
import httpx2

from psych_runtime.activities.egress._guard import EgressDenied

ANSWERED = "psych_egress_answered"
"""The request extension the egress port's httpx transport sets on a request once its
response came: a redirect's request (httpx copies the extensions into it) carries it, so a
failure to connect for the redirect is known to follow a request that was sent."""

_BEFORE_SENDING = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
"""Failures to get a connection (refused, unreachable, a name that does not resolve, a TLS
handshake refused, none within the timeout or from the pool): nothing of the request was
written."""


def never_sent(err: BaseException) -> bool:
    """Whether the request ``err`` (or the first HTTP failure among its causes) ended
    provably never left the worker, nor any request before it in its redirects: a
    connection the egress policy refused (``EgressDenied``) or that was never made
    (``_BEFORE_SENDING``) for the request itself, not for a redirect of it. False for
    anything else: the request may have reached the server."""
    link: BaseException | None = err
    seen: set[int] = set()
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if isinstance(link, EgressDenied):
            return not link.redirected
        if isinstance(link, httpx.HTTPError):
            if not isinstance(link, _BEFORE_SENDING):
                return False
            try:
                request = link.request
            except RuntimeError:  # raised without its request: not known
                return False
            return not request.extensions.get(ANSWERED)
        link = link.__cause__ or link.__context__
    return False


_LEFT_UNSENT = (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout)
"""``_BEFORE_SENDING`` for an httpx2 client (an MCP session's)."""


@dataclass
class Attempt:
    """A request an MCP session's client made inside ``attempts``, noted as it starts: its
    body (None when it was streamed, not read) and whether it provably never left (its
    connection refused or never made, or refused by the egress policy). False until it
    failed so: a request still going may have left."""

    method: str
    body: bytes | None
    unsent: bool = False


_ATTEMPTS: ContextVar[list[Attempt] | None] = ContextVar("psych_egress_attempts", default=None)


@contextmanager
def attempts(into: list[Attempt]) -> Iterator[list[Attempt]]:
    """Append to ``into`` each request an MCP session's client (``Bounded2``) makes in
    this context until the block ends, in tasks started from it too: the MCP SDK sends a
    request from its session's writer task in the context of the task that asked for it.
    A task outliving the block (a session's owner, the pool's reaper) starts in
    ``untracked()``; one that holds the context anyway (the SDK's writer keeps its last
    sender's) holds ``into``, which its caller empties once read (the bodies it keeps)."""
    token = _ATTEMPTS.set(into)
    try:
        yield into
    finally:
        _ATTEMPTS.reset(token)


def untracked() -> Context:
    """A copy of the current context in which no ``attempts`` block records."""
    context = copy_context()
    context.run(_ATTEMPTS.set, None)
    return context


def attempting(request: httpx2.Request) -> Attempt | None:
    """Note ``request`` as it starts for the ``attempts`` block around it (None: none)."""
    into = _ATTEMPTS.get()
    if into is None:
        return None
    try:
        body: bytes | None = request.content
    except httpx2.RequestNotRead:
        body = None
    into.append(Attempt(request.method, body))
    return into[-1]


def failed(attempt: Attempt | None, request: httpx2.Request, err: BaseException) -> None:
    """Note that ``attempt`` (of ``request``) failed with ``err``: never left, when it
    was refused or never connected for the request itself (not for a redirect of it)."""
    if attempt is None:
        return
    if isinstance(err, EgressDenied):
        attempt.unsent = not err.redirected
    else:
        attempt.unsent = isinstance(err, _LEFT_UNSENT) and not request.extensions.get(ANSWERED)
