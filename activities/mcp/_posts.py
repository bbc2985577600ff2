"""A pooled streamable-HTTP session's client, on which one POST's transport fault is that
message's failure alone, not the session's end.

The SDK's streamable HTTP transport sends each request as its own POST, in a task of the
transport's task group: an exception there (a connection refused or reset, a read timeout,
an egress refusal, a JSON body cut short or over the egress bound) ends the whole session,
and every other request in flight with it ("Connection closed"), answers the server was
about to send lost. ``OnePostFails`` turns such a fault, once the session is connected,
into what a server's error would be:

- a request's POST is answered with a JSON-RPC error of ``CONNECTION_CLOSED`` naming the
  fault, for that request alone (the pool's lease then raises ``SessionBroke``; whether it
  left is the ``attempts`` record's, as before);
- a notification's or a response's POST, which nobody waits for, is dropped with a warning
  (a 202, which the SDK takes as delivered);

and either tells the session: the asking lease and the session of the fault (``tell``, the
pool's ``tell``: ``PostFailed``, so that lease's error names its own fault, not another's
the session was told of), and the session's owner (``on_fault``, the pool's
``on_message``), which lends it no more and closes it when its last lease ends, as for
any transport fault it is told of.

A request it makes in no lease other than a POST (the event stream the session keeps open
with a GET, the DELETE ending it) is marked as the session's own (``_told.stand``): no
call's, so what its OAuth flow meets is nobody's (``_told.py``).

Transport faults: ``httpx2.RequestError`` (the egress bound's ``McpResponseTooLarge`` is
one, told by the bound itself) and ``EgressDenied``. Likewise what an OAuth provider
raised on purpose in the request's own flow, which ``ToldAuth`` told already
(``_told.flow_told``: a token store's ``StoreUnavailable``, a token the authorization
server refused, a failed flow): the asking lease raises what it was told, as it did when
the fault ended the session; a flow stopped for a person's consent too (its asker takes
the parked flow, ``_consent.asking``; until 12-07 it ended the session, and with it the
answers of other calls already with the server). Not any other exception. Before the
session is connected (the handshake, the era's fallback), a fault fails the connecting as
before.

An SSE session's POSTs run in the SDK's one writer task, which ends with the first POST
that raises (a transport fault, or ``raise_for_status`` on an error status or on a redirect
it does not follow, ``next_request_within_origin``): that request
is never answered and nothing more is sent. ``ToldPosts`` tells the session of such a POST
(``PostFailed``, in the asking lease's context) before the SDK sees it, so the pool fails
that lease at once and lends the session no more (``_pool.py``), as for a failed OAuth
flow; a fault the session was already told of (an egress refusal of a reply, a token
refused) is not told twice. While the session connects, its handshake's POST so fails the
connecting at once, with the POST's reason (until 12-07 it waited out the connect timeout).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import httpx2
import mcp_types
from mcp.shared._httpx_utils import next_request_within_origin, redirect_note

from psych_runtime.activities.egress import EgressDenied, McpResponseTooLarge
from psych_runtime.activities.mcp._lease import TOLD
from psych_runtime.activities.mcp._told import flow_told, stand

_log = logging.getLogger(__name__)

_FAULTS = (httpx2.RequestError, EgressDenied)
"""A POST's transport faults (the egress port's own refusals included)."""


class OnePostFails(httpx2.AsyncClient):
    """An httpx2 client whose POSTs (MCP messages) fail alone on a transport fault or a
    failed OAuth flow while ``live()`` (the module docstring): ``tell`` is told of the
    fault, unless told already, then ``on_fault`` of what was told."""

    def __init__(
        self,
        *,
        live: Callable[[], bool],
        tell: Callable[[Exception], None],
        on_fault: Callable[[Exception], None],
        **options: Any,
    ) -> None:
        super().__init__(**options)
        self._live = live
        self._tell = tell
        self._on_fault = on_fault

    async def send(self, request: httpx2.Request, **options: Any) -> httpx2.Response:
        if request.method != "POST" and TOLD.get() is None:
            # In no lease: the event stream the SDK opens once the session is initialized,
            # in the context that sent ``notifications/initialized`` (the owner's, which
            # keeps its opener's asker), or the DELETE ending the session: the session's
            # own, no call's (``_told.standing``).
            stand(request)
        if request.method != "POST" or not self._live():
            return await super().send(request, **options)
        try:
            response = await super().send(request, **options)
            if _event_stream(response):
                return response  # its faults are the SDK's (it fails the request alone)
            try:
                # Read here, where a fault is caught: the SDK reads a JSON body in the
                # POST's task, where it would end the session (bounded: not a stream).
                await response.aread()
            except BaseException:
                await response.aclose()
                raise
            return response
        except Exception as err:
            told = flow_told(request, err)
            if told is None and not isinstance(err, _FAULTS):
                raise
            return self._failed(request, err, told)

    def _failed(
        self, request: httpx2.Request, err: Exception, told: Exception | None
    ) -> httpx2.Response:
        said = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
        if told is None:
            if isinstance(err, McpResponseTooLarge):
                told = err  # the egress bound told it itself
            else:
                told = PostFailed(f"sending an MCP message failed: {said}")
                self._tell(told)
        self._on_fault(told)
        message = _message(request)
        if "method" in message and "id" in message:
            error = {"code": mcp_types.CONNECTION_CLOSED, "message": str(told)}
            answer = {"jsonrpc": "2.0", "id": message["id"], "error": error}
            return httpx2.Response(200, json=answer, request=request)
        what = message.get("method", "a response")
        _log.warning("an MCP message (%s) was not delivered: %s", what, said)
        return httpx2.Response(202, request=request)


class PostFailed(Exception):
    """An SSE session's POST failed (``ToldPosts``); the message names why."""


class ToldPosts(httpx2.AsyncClient):
    """A pooled SSE session's client: a POST failing (a transport fault, an error status
    or a redirect the SDK does not follow, which the SDK's writer raises) is told to
    ``on_fault`` as ``PostFailed`` before the SDK sees it (the module docstring), while
    connecting too: the writer ends then just as well, and the handshake waits for an
    answer that never comes."""

    def __init__(self, *, on_fault: Callable[[Exception], None], **options: Any) -> None:
        super().__init__(**options)
        self._on_fault = on_fault

    async def send(self, request: httpx2.Request, **options: Any) -> httpx2.Response:
        if request.method != "POST":
            return await super().send(request, **options)
        try:
            response = await super().send(request, **options)
        except _FAULTS as err:
            if not isinstance(err, McpResponseTooLarge):  # the egress bound told it itself
                said = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
                self._on_fault(PostFailed(f"sending an MCP message failed: {said}"))
            raise
        if not response.is_success and next_request_within_origin(response) is None:
            # Raised by the SDK's writer: an error status, or a redirect it does not follow
            # (another origin, or a 301/302/303 turning the POST into a GET; 12-07: told
            # nothing, a redirected handshake waited out the connect timeout, a call its own).
            self._on_fault(
                PostFailed(
                    f"the MCP server answered a message with HTTP {response.status_code}"
                    f"{redirect_note(response)}"
                )
            )
        return response


def _event_stream(response: httpx2.Response) -> bool:
    media = response.headers.get("content-type", "").split(";")[0].strip().lower()
    return media == "text/event-stream"


def _message(request: httpx2.Request) -> dict[str, Any]:
    """The JSON-RPC message ``request`` carries (the SDK's body, read whole)."""
    try:
        message = json.loads(request.content)
    except (ValueError, httpx2.RequestNotRead):
        return {}
    return message if isinstance(message, dict) else {}
