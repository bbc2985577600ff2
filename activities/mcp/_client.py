"""Connecting one MCP client session: the SDK's transport and ``Client`` entered through the
worker's egress, the protocol era chosen (``_era.py``), and what a failure says.

The SDK's transports and session are anyio context managers whose cancel scopes must be
exited by the task that entered them: ``open_client`` is entered and exited in one task
(the pool's owner task of the session, ``_pool.py``; ``check_servers``' own).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from functools import partial

import httpx2
import mcp_types
from mcp.client import Client
from mcp.client.session import ClientRequestContext, IncomingMessage
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from psych_runtime.activities.egress import Egress
from psych_runtime.activities.mcp._era import handshake_refused
from psych_runtime.activities.mcp._posts import OnePostFails, ToldPosts
from psych_runtime.activities.mcp._streams import StreamWatch, watched
from psych_runtime.activities.mcp._told import ToldAuth

_SSE_READ_SECONDS = 300.0
"""How long an open event stream may stay silent before the transport gives up on it (the
SDK's default; a pooled session idles longer than any call)."""


def describe_error(err: BaseException) -> str:
    """One line naming what failed: the innermost meaningful exceptions of a group.

    anyio task groups wrap a transport's failure in ``ExceptionGroup``s; the model and the
    operator want the ``ConnectError: ...`` inside, not the wrapping.
    """
    if isinstance(err, BaseExceptionGroup):
        parts = [describe_error(inner) for inner in err.exceptions]
        return "; ".join(dict.fromkeys(parts))
    if isinstance(err, MCPError):
        return f"MCP error {err.code}: {err.message}"
    if isinstance(err, TimeoutError):
        return "timed out"
    text = str(err)
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


@asynccontextmanager
async def open_client(
    url: str,
    transport: str,
    headers: dict[str, str],
    *,
    connect_timeout: float,
    egress: Egress,
    tenant: str,
    on_message: Callable[[IncomingMessage], None] | None = None,
    auth: httpx2.Auth | None = None,
    on_refused: Callable[[Exception], None] | None = None,
    watch: StreamWatch | None = None,
) -> AsyncIterator[Client]:
    """Connect to an MCP server: the ``initialize`` handshake, or the stateless 2026-07-28
    protocol when the server refuses the handshake (``_era.py`` says why in that order).

    ``on_refused`` is told of each reply the egress policy refused (``McpResponseTooLarge``:
    over ``max_response_bytes``) and of each failure of the OAuth provider ``auth`` (a
    token the authorization server refused: ``ToldAuth``), since the SDK then ends the
    session saying only "Connection closed": whoever owns the session says why instead
    (``refusal``).

    ``watch`` (``_streams.py``) is told when the server ends the connected session, and
    counts the messages handed to its transport (a handshake refused before the fallback
    ends no session it is told of).

    ``auth`` (an OAuth provider) is attached to the session's own client, so its requests
    (metadata discovery, the token endpoint) go through ``egress`` like the MCP ones.

    The SDK's response cache is off because the worker keeps its own catalogue cache,
    keyed by session and dropped on ``tools/list_changed``; an elicitation callback is
    given only so the client declares the elicitation capability, which servers check
    before they ask for input (``_input.py`` answers through the Run, never inside a
    call). Enter and exit it in one task.
    """
    options = _Options(
        url,
        transport,
        headers,
        connect_timeout,
        egress,
        tenant,
        on_message,
        auth,
        on_refused,
        watch,
    )
    async with AsyncExitStack() as stack:
        try:
            client = await stack.enter_async_context(_open(options, "legacy"))
        except Exception as err:
            if transport == "sse" or not handshake_refused(err):
                raise
            client = await stack.enter_async_context(_open(options, "auto"))
        if watch is not None:
            watch.live = True
        yield client


@dataclass(frozen=True)
class _Options:
    url: str
    transport: str
    headers: dict[str, str]
    connect_timeout: float
    egress: Egress
    tenant: str
    on_message: Callable[[IncomingMessage], None] | None
    auth: httpx2.Auth | None
    on_refused: Callable[[Exception], None] | None
    watch: StreamWatch | None


def refusal(refused: list[Exception], err: BaseException) -> str:
    """Why a session ended: the egress policy's refusal of a reply, or the OAuth flow's
    failure, if any (the SDK's error then says only "connection closed"), else ``err``."""
    return str(refused[-1]) if refused else describe_error(err)


async def _refuse_elicitation(
    context: ClientRequestContext, params: mcp_types.ElicitRequestParams
) -> mcp_types.ElicitResult | mcp_types.ErrorData:
    """A handshake-era server asking mid-call: refused as the SDK's default refuses it
    (input is asked of a person through the Run, between calls, never inside one)."""
    return mcp_types.ErrorData(
        code=mcp_types.INVALID_REQUEST,
        message="Elicitation inside a call is not supported; this client answers "
        "input_required results (MCP 2026-07-28)",
    )


def _posting(options: _Options) -> Callable[..., httpx2.AsyncClient]:
    """The maker of a streamable-HTTP session's client: for a pooled session told of
    failures (one ``watch``ed, with ``on_refused``), one whose POSTs fail alone once it is
    connected (``_posts.py``)."""
    watch, told = options.watch, options.on_refused
    if watch is None or told is None:
        return httpx2.AsyncClient

    def fault(err: Exception) -> None:
        if options.on_message is not None:
            options.on_message(err)

    return partial(OnePostFails, live=lambda: watch.live, tell=told, on_fault=fault)


def _sse_posting(options: _Options) -> Callable[..., httpx2.AsyncClient]:
    """The maker of an SSE session's client: for a pooled session told of failures (one
    ``watch``ed, with ``on_refused``), one telling it of a failed POST, which ends the
    SDK's writer, connected or not (``_posts.py``)."""
    if options.watch is None or options.on_refused is None:
        return httpx2.AsyncClient
    return partial(ToldPosts, on_fault=options.on_refused)


@asynccontextmanager
async def _open(options: _Options, mode: str) -> AsyncIterator[Client]:
    async def handler(message: IncomingMessage) -> None:
        if options.on_message is not None:
            options.on_message(message)

    auth = options.auth
    if auth is not None and options.on_refused is not None:
        auth = ToldAuth(auth, options.on_refused)
    async with AsyncExitStack() as stack:
        if options.transport == "sse":
            streams = sse_client(
                options.url,
                headers=options.headers,
                timeout=options.connect_timeout,
                sse_read_timeout=_SSE_READ_SECONDS,
                httpx_client_factory=options.egress.mcp_factory(
                    options.tenant, options.on_refused, make=_sse_posting(options)
                ),
                auth=auth,
            )
        else:
            http = await stack.enter_async_context(
                options.egress.mcp_client(
                    options.tenant,
                    headers=options.headers,
                    timeout=httpx2.Timeout(options.connect_timeout, read=_SSE_READ_SECONDS),
                    auth=auth,
                    on_refused=options.on_refused,
                    make=_posting(options),
                )
            )
            streams = streamable_http_client(options.url, http_client=http)
        if options.watch is not None:
            streams = watched(streams, options.watch)
        client = Client(
            streams,
            mode=mode,
            cache=None,
            message_handler=handler,
            elicitation_callback=_refuse_elicitation,
        )
        yield await stack.enter_async_context(client)
