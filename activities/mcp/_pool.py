"""The worker's MCP client sessions, pooled by who uses them.

A session is keyed by ``(tenant, principal, url, transport, credential identity)``, never
by URL alone: two tenants, or two principals, or two credentials reaching one server never
share a session, so nothing one of them did on it (its auth, its server-side state) can
reach the other. The credential identity is the sha256 of the resolved secret, so the key
tells credentials apart without holding one.

The SDK's transports and session are anyio context managers whose cancel scopes must be
exited by the task that entered them. So each pooled session is owned by one asyncio task
that enters them, publishes the connected client, and holds them open until it is told to
close; activities send their requests on that client from their own tasks (each request's
own scopes live in the requesting task, so cancelling an activity cancels its request and
the SDK tells the server with ``notifications/cancelled``).

The pool is bounded (``max_sessions``; the least recently used idle session is closed to
make room), closes sessions idle for ``idle_seconds``, and drops a session whose transport
failed, or whose server ended it (an SSE server shut down cleanly ends its event stream,
after which the SDK refuses every request unsent: ``_streams.py``), so the next use
connects again. ``aclose`` closes every session. Connecting one session, and what its
failure says, is ``_client.py``'s.

What a failed OAuth flow or a refused reply told the session (``refused``) is also told to
the lease whose request it was (the SDK sends a request in its asker's context), so a
lease raises only its own: a token store that failed another call's flow on the same
session is not this call's, which may well have reached the server. On an SSE session the
SDK's writer task ends with the POST that failed, leaving that request unanswered and the
session sending nothing more: the session is lent no more, and a lease waiting in
``unless_told`` stops at once with the failure (``_told_failure``); requests other leases
had POSTed still get their answers on the event stream. A POST failing outside its OAuth
flow (a transport fault, an error status) is told likewise (``_posts.ToldPosts``); told
while the session connects, it fails the connecting at once with its reason. On
streamable HTTP such a request fails alone (``_posts.OnePostFails``; a consent need too,
its asker's: ``_consent.asking``), the session lent no more, and a lease's ``SessionBroke`` names
its own fault, the session's only when it was told none; a request whose OAuth flow failed
before sending it did not leave (``nothing_handed``), as over SSE.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import httpx2
import mcp_types
from mcp.client import Client
from mcp.client.session import IncomingMessage
from mcp.shared.exceptions import MCPError

from psych_runtime.activities.egress import Egress, untracked
from psych_runtime.activities.mcp._client import describe_error, open_client, refusal
from psych_runtime.activities.mcp._era import is_stateless
from psych_runtime.activities.mcp._lease import (
    TOLD,
    Told,
    flow_unsent,
    store_down,
    token_refused,
    unless_told,
)
from psych_runtime.activities.mcp._posts import PostFailed
from psych_runtime.activities.mcp._streams import StreamWatch
from psych_runtime.activities.mcp._told import OAuthFailed
from psych_runtime.specs import Scope, StoreUnavailable

__all__ = [
    "McpSessions",
    "McpUnavailable",
    "RequestFailed",
    "SessionBroke",
    "SessionKey",
    "describe_error",
    "open_client",
    "refusal",
    "unless_told",
]
"""What the pool offers; the session's connecting half (``open_client``, ``describe_error``,
``refusal``) lives in ``_client.py`` and is named here too, for the pool's callers."""

_log = logging.getLogger(__name__)

_FLUSH_SECONDS = 5.0
"""Bound on the ping a closing session sends first (the SDK's own bound on a courtesy
cancel's write), so an unresponsive server delays a worker's shutdown by no more."""


_ENDED = "the server ended the session"
"""Why a session whose server ended its stream cannot be used (``_streams.py``)."""

_SESSION_GONE = frozenset({mcp_types.CONNECTION_CLOSED, mcp_types.INVALID_REQUEST})
"""Errors after which a session is dropped: the connection closed, or the server no longer
knows the session (a restarted streamable-HTTP server answers 404, which the SDK reports as
INVALID_REQUEST; the SDK itself never sends an invalid request, so a dropped session costs
at most a reconnect)."""


@dataclass(frozen=True, order=True)
class SessionKey:
    """Who a pooled session serves and where it goes. Holds no secret."""

    tenant: str
    principal: str | None
    url: str
    transport: str
    credential: str | None
    """sha256 hex digest of the resolved credential (None: the server takes none)."""

    @classmethod
    def of(cls, scope: Scope, url: str, transport: str, secret: str | None) -> SessionKey:
        """The key for ``scope`` reaching ``url`` with ``secret`` (hashed here)."""
        identity = None if secret is None else hashlib.sha256(secret.encode()).hexdigest()
        return cls(scope.tenant, scope.principal, url, transport, identity)

    def __repr__(self) -> str:
        who = self.tenant if self.principal is None else f"{self.tenant}/{self.principal}"
        cred = "none" if self.credential is None else self.credential[:8]
        return f"SessionKey({who} {self.transport} {self.url} credential={cred})"


class McpUnavailable(Exception):
    """A server could not be reached or its session broke (the message names why)."""


class SessionBroke(McpUnavailable):
    """A pooled session broke during a lease before the lease's request had its answer
    (the pool has dropped it)."""

    def __init__(self, reason: str, *, reused: bool, nothing_handed: bool = False) -> None:
        """``reused``: the session had served earlier leases (it was not new to this one),
        so a fresh session may well work where it failed. ``nothing_handed``: no message
        reached the session's transport during the lease (the SDK refused them unsent), or
        the request that failed it did not leave (its OAuth flow failed before sending
        it), so nothing the lease asked for reached the server."""
        super().__init__(f"the session broke: {reason}")
        self.reused = reused
        self.nothing_handed = nothing_handed


class RequestFailed(SessionBroke):
    """A request of the lease failed on an SSE session before it left or was answered
    (its OAuth flow failed, or the server refused the token just obtained for it): the
    failure's own words. The SDK's SSE writer ended with that POST, so the session broke
    too (``nothing_handed``: the flow failed before sending the request)."""

    def __init__(self, told: Exception) -> None:
        McpUnavailable.__init__(self, str(told))
        self.reused = False  # a fresh session would meet the same flow
        self.nothing_handed = isinstance(told, OAuthFailed) and told.unsent


def _told_failure(told: list[Exception]) -> Exception:
    """What a lease whose request failed on an SSE session raises: the token store's
    ``StoreUnavailable`` as it is (transient, nothing sent), else ``RequestFailed``."""
    last = told[-1]
    return last if isinstance(last, StoreUnavailable) else RequestFailed(last)


@dataclass(eq=False)
class _Pooled:
    key: SessionKey
    ready: asyncio.Future[Client]
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    users: int = 0
    last_used: float = field(default_factory=time.monotonic)
    broken: str | None = None
    """Why the session cannot be used any more (its transport failed)."""
    refused: list[Exception] = field(default_factory=list)
    """Replies the egress policy refused (too large) and failed OAuth flows: why the
    session ended, if it did."""
    listening: bool = False
    """Connected on a handshake-era session, which is told of ``tools/list_changed``."""
    watch: StreamWatch = field(init=False)
    """Its transport's streams: the server's end of it, and the messages handed over."""

    def __post_init__(self) -> None:
        self.watch = StreamWatch(on_end=self._ended)

    def _ended(self) -> None:
        if self.closing.is_set():  # the owner's own close
            return
        self.broken = self.broken or _ENDED
        _log.warning("MCP session %r ended: %s", self.key, self.broken)
        self.close_when_unused()

    def close_when_unused(self) -> None:
        """Close it now if no lease holds it. Else its last lease closes it (``_drop``):
        closed now, a lease's next request would meet a Client no longer entered, not the
        SDK's "Connection closed", and a request another lease has with the server (each
        its own POST on streamable HTTP) would be cut off before its answer."""
        if self.users == 0:
            self.closing.set()

    def tell(self, err: Exception) -> None:
        """``err`` was told: the session's, and the asking lease's (``TOLD``)."""
        told = TOLD.get()
        if isinstance(err, PostFailed) and told is not None and told.unanswered.is_set():
            return  # the POST of a request already told why (its OAuth flow, its token)
        self.refused.append(err)
        if told is not None:
            told.append(err)
        if self.key.transport == "sse":
            # The SDK's SSE writer ends with the POST that failed (its flow's exception, or
            # the error status of a refused token): nothing more is sent on the session, and
            # that request is never answered (12-07: its call waited out its timeout).
            self.broken = self.broken or str(err)
            self.close_when_unused()
            if told is not None:
                told.unanswerable(_told_failure(told))
            if self.task not in (None, asyncio.current_task()) and not self.ready.done():
                # Still connecting, told by the SDK's writer: the handshake's POST is never
                # answered, so connecting fails now with why (12-07: it waited out the
                # connect timeout). The owner's own GET meets its failure raised, as before.
                self.ready.set_exception(store_down([err]) or McpUnavailable(str(err)))
                self.task.cancel()


class McpSessions:
    """A bounded pool of connected MCP clients, one owner task each."""

    def __init__(
        self,
        *,
        max_sessions: int,
        idle_seconds: float,
        connect_timeout: float,
        on_tools_changed: Callable[[SessionKey], None],
        egress: Egress,
        on_closed: Callable[[SessionKey], None] | None = None,
    ) -> None:
        """Create an empty pool.

        Args:
            max_sessions: most sessions kept open at once (idle ones beyond it are closed,
                least recently used first; sessions in use are never closed under a call).
            idle_seconds: a session unused this long is closed.
            connect_timeout: bound on connecting plus ``initialize``.
            on_tools_changed: called with a session's key when its server sends
                ``notifications/tools/list_changed`` (the catalogue cache drops it).
            egress: every session connects through its clients, for the key's tenant.
            on_closed: called with a session's key when a session that spoke the
                handshake-era protocol ends (closed, dropped or broken): nobody hears that
                server's ``list_changed`` for the key until a session opens again, so the
                catalogue cache drops it too.
        """
        self._max = max_sessions
        self._idle = idle_seconds
        self._connect_timeout = connect_timeout
        self._on_tools_changed = on_tools_changed
        self._on_closed = on_closed
        self._egress = egress
        self._sessions: OrderedDict[SessionKey, _Pooled] = OrderedDict()
        self._tasks: set[asyncio.Task[None]] = set()
        """Every owner task still running, dropped sessions' included (``aclose`` waits)."""
        self._reaper: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def keys(self) -> tuple[SessionKey, ...]:
        """The keys of the sessions open (or opening) now."""
        return tuple(self._sessions)

    @asynccontextmanager
    async def client(
        self,
        key: SessionKey,
        url: str,
        headers: dict[str, str],
        auth: httpx2.Auth | None = None,
    ) -> AsyncIterator[Client]:
        """Lease the connected client for ``key``, connecting first when there is none.

        ``headers`` (carrying the credential) are used only to connect; they are never
        stored on the pool. ``auth`` (an OAuth provider) stays with the session's client,
        which asks it for a new token whenever the server answers 401.

        Raises:
            McpUnavailable: connecting failed or timed out.
            StoreUnavailable: the worker's token store did not answer (``ToldAuth``).
            SessionBroke: the session broke before a request of the lease had its answer
                (the pool drops it, so the next lease connects again). A lease whose body
                returned raises none: its answers arrived, so they stand.
        """
        if self._closed:
            raise McpUnavailable("the worker's MCP sessions are closed")
        pooled = self._sessions.get(key)
        if pooled is not None and pooled.broken is not None:
            self._drop(pooled)
            pooled = None
        reused = pooled is not None
        if pooled is None:
            pooled = self._open(key, url, headers, auth)
        self._sessions.move_to_end(key)
        pooled.users += 1
        try:
            try:
                async with asyncio.timeout(self._connect_timeout):
                    client = await asyncio.shield(pooled.ready)
            except TimeoutError:
                self._drop(pooled)
                raise McpUnavailable(
                    f"no answer to connect and initialize within {self._connect_timeout:g} s"
                ) from None
            except McpUnavailable:
                self._drop(pooled)
                raise
            if pooled.broken is not None:  # ended while this lease waited: nothing sent
                raise SessionBroke(pooled.broken, reused=reused, nothing_handed=True)
            handed = pooled.watch.handed
            told = Told()
            telling = TOLD.set(told)
            try:
                yield client
            except MCPError as err:
                if (down := store_down(told)) is not None:
                    raise down from None  # the worker's store, not the server: as it is
                refused = token_refused(told, pooled.refused)
                if refused is not None:
                    raise McpUnavailable(str(refused)) from err
                if err.code not in _SESSION_GONE:
                    raise
                if pooled.refused or pooled.broken is None:
                    pooled.broken = refusal(pooled.refused, err)
                # Its own fault when it was told one: the session's last (``broken``) may
                # be another lease's (12-07: told "response too large" for its ConnectError).
                reason = refusal(told, err) if told else pooled.broken
                # Nothing handed to the transport, or its OAuth flow failed before its request
                # left (12-07: handed, so read "may have run" where SSE said "did not run").
                unsent = pooled.watch.handed == handed or flow_unsent(told, err.message)
                raise SessionBroke(reason, reused=reused, nothing_handed=unsent) from err
            finally:
                TOLD.reset(telling)
            # Returned: every request of the lease had its answer, which stands whatever
            # broke the session since (another lease's fault, a retire, the server's end);
            # the session itself is dropped below and lent no more. Until 12-07 a session
            # broken by another lease failed this one too, its answer dropped as may have run.
        finally:
            pooled.users -= 1
            pooled.last_used = time.monotonic()
            if pooled.broken is not None:
                self._drop(pooled)
            self._trim()

    def _open(
        self, key: SessionKey, url: str, headers: dict[str, str], auth: httpx2.Auth | None
    ) -> _Pooled:
        pooled = _Pooled(key=key, ready=asyncio.get_running_loop().create_future())
        self._sessions[key] = pooled
        # The owner and the reaper outlive the opening call: neither in its attempts block.
        owner = self._own(pooled, url, dict(headers), auth)
        pooled.task = asyncio.create_task(owner, name=f"mcp-session {key!r}", context=untracked())
        self._tasks.add(pooled.task)
        pooled.task.add_done_callback(self._tasks.discard)
        if self._reaper is None or self._reaper.done():
            reap, name = self._reap(), "mcp-session-reaper"
            self._reaper = asyncio.create_task(reap, name=name, context=untracked())
        return pooled

    async def _own(
        self, pooled: _Pooled, url: str, headers: dict[str, str], auth: httpx2.Auth | None
    ) -> None:
        """The owner task: enter the transport and session, wait, exit them here."""
        TOLD.set(None)  # the session's own requests are no lease's (its context is its own)

        def on_message(message: IncomingMessage) -> None:
            if isinstance(message, Exception):
                # A transport fault: the stream is gone or garbled; connect afresh next time.
                # The transport reads on after a message it could not read, so the requests
                # of leases holding the session still get their answers (12-07: it was
                # closed at once, failing them as may have run); a stream that is gone
                # ends, and the SDK fails them at once.
                pooled.broken = refusal(pooled.refused, message)
                pooled.close_when_unused()
            elif isinstance(message, mcp_types.ToolListChangedNotification):
                self._on_tools_changed(pooled.key)

        try:
            async with open_client(
                url,
                pooled.key.transport,
                headers,
                connect_timeout=self._connect_timeout,
                egress=self._egress,
                tenant=pooled.key.tenant,
                on_message=on_message,
                auth=auth,
                on_refused=pooled.tell,
                watch=pooled.watch,
            ) as client:
                headers.clear()  # the owner keeps no credential once connected
                pooled.listening = not is_stateless(client)
                if not pooled.ready.done():
                    pooled.ready.set_result(client)
                await pooled.closing.wait()
                if pooled.broken is None and not is_stateless(client):
                    # A cancelled call's notifications/cancelled is only queued when the call
                    # returns; messages are POSTed in order, so the ping's answer means it
                    # reached the server (closing at once, a shutdown right after cancelling,
                    # would drop it). The session's ping, not Client.send_ping, which warns
                    # the 2026 wire has none: this client speaks the legacy one (open_client).
                    # A stateless session has neither ping nor queued notices to flush.
                    with contextlib.suppress(Exception):
                        async with asyncio.timeout(_FLUSH_SECONDS):
                            await client.session.send_ping()
        except asyncio.CancelledError:
            if not pooled.ready.done():
                pooled.ready.set_exception(McpUnavailable("connecting was cancelled"))
            raise
        except Exception as err:
            reason = refusal(pooled.refused, err)
            pooled.broken = reason
            if not pooled.ready.done():
                pooled.ready.set_exception(store_down(pooled.refused) or McpUnavailable(reason))
            else:
                _log.warning("MCP session %r ended: %s", pooled.key, reason)
        finally:
            pooled.broken = pooled.broken or "closed"
            if self._sessions.get(pooled.key) is pooled:
                del self._sessions[pooled.key]
            if pooled.listening and self._on_closed is not None:
                self._on_closed(pooled.key)
            # Nobody may be left waiting, and a never-awaited exception must not be logged.
            if pooled.ready.done() and not pooled.ready.cancelled():
                pooled.ready.exception()

    def retire(self, key: SessionKey, reason: str) -> None:
        """Close the session of ``key`` once its users are done (the next use connects
        afresh): its credential is no longer good, e.g. a token a person must renew."""
        pooled = self._sessions.get(key)
        if pooled is None:
            return
        pooled.broken = pooled.broken or reason
        if pooled.users == 0:
            self._drop(pooled)

    def _drop(self, pooled: _Pooled) -> None:
        """Take ``pooled`` out of the pool; close it now, or, while leases still hold its
        client, when the last of them ends (its ``finally`` drops it again)."""
        if self._sessions.get(pooled.key) is pooled:
            del self._sessions[pooled.key]
        if not pooled.ready.done():
            pooled.closing.set()
            if pooled.task is not None:
                pooled.task.cancel()  # still connecting: nothing to wait for
        elif pooled.users == 0:
            pooled.closing.set()

    def _trim(self) -> None:
        """Close idle sessions past the bound, least recently used first."""
        excess = len(self._sessions) - self._max
        for pooled in list(self._sessions.values()):
            if excess <= 0:
                return
            if pooled.users == 0:
                self._drop(pooled)
                excess -= 1

    async def _reap(self) -> None:
        """Close sessions idle longer than ``idle_seconds``, until the pool empties."""
        while self._sessions:
            await asyncio.sleep(max(0.05, self._idle / 4))
            now = time.monotonic()
            for pooled in list(self._sessions.values()):
                if pooled.users == 0 and now - pooled.last_used >= self._idle:
                    self._drop(pooled)

    async def aclose(self) -> None:
        """Close every session and wait for their owner tasks to finish."""
        self._closed = True
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        for pooled in list(self._sessions.values()):
            pooled.closing.set()
        if self._tasks:
            await asyncio.wait(set(self._tasks))
