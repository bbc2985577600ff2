"""How a listing reads Temporal's visibility: page by page, through the client's
interceptors.

Every page goes through ``Client.list_workflows``, so a client interceptor on it (auth
metadata, a tenancy rewrite of the query, audit, tracing) sees each request of a listing
and what it rewrites is what Temporal is asked. The page's iterator is fetched once
(``fetch_next_page``), so Temporal's next page token is exactly where the page ends.

The iterator's pages always take the client's retries, which a cursor's first page must
not: a position Temporal cannot read is refused as UNKNOWN by SQL visibility, which the
client retries as transient (~10 s by default, the outage window under
``psych_runtime.workers.connect``). That page is asked once, without retries, of the
request as the client's interceptors leave it: a copy of the client with a last
(innermost) interceptor of ours reads the final ``ListWorkflowsInput`` and the request is
made from it. An interceptor so sees that call and its rewrite applies; only what it would
do when the returned iterator fetches (it never does) does not run for that one try. One
that passes the call on only as the page is fetched (it awaits a credential first, say:
``list_workflows`` is synchronous) leaves no request to read: that page is then fetched
as any other, with the retries (a position Temporal cannot read is refused after them).

Every request waits ``rpc_timeout`` at most (``TEMPORAL_READ_TIMEOUT``), each try of a
retried one: ``listing_read`` makes Temporal's silence a ``TemporalUnanswered`` naming the
listing (a listing names no single Run: its ``subject`` is the tenant's Run listing), and a
timeout's status it answers at once (a CANCELLED under load) a ``TemporalCancelled`` saying
so, which REST answers 503 ``temporal`` and ``psych list`` prints as one line.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

from temporalio.api.workflow.v1 import WorkflowExecutionInfo
from temporalio.api.workflowservice.v1 import ListWorkflowExecutionsRequest
from temporalio.client import (
    Client,
    Interceptor,
    ListWorkflowsInput,
    OutboundInterceptor,
    WorkflowExecutionAsyncIterator,
)
from temporalio.service import RPCError, RPCStatusCode

from psych_runtime.specs import BadCursor
from psych_runtime.workflows.client._asked import (
    TEMPORAL_READ_TIMEOUT,
    TemporalCancelled,
    TemporalUnanswered,
    read_mapped,
    unanswered,
)

T = TypeVar("T")

_UNREADABLE_TOKEN = (RPCStatusCode.INVALID_ARGUMENT, RPCStatusCode.UNKNOWN)
"""How Temporal refuses a page token it cannot read: INVALID_ARGUMENT (Elasticsearch
visibility), UNKNOWN (SQL visibility, the dev server's: its error is masked as "something
went wrong, please retry"). The client retries UNKNOWN (about 10 s by default)."""


@dataclass(frozen=True)
class Page:
    """One page of a visibility listing."""

    executions: Sequence[WorkflowExecutionInfo]
    token: bytes | None
    """Temporal's next page token; None on the last page."""


class _Asked(Interceptor):
    """The innermost interceptor of ``Visibility``'s copy of the client: keeps the last
    ``list_workflows`` request as the interceptors before it left it."""

    def __init__(self) -> None:
        self.last: ListWorkflowsInput | None = None

    def take(self) -> ListWorkflowsInput | None:
        """The last request kept (None: none since the last taken)."""
        last, self.last = self.last, None
        return last

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _AskedOutbound(next, self)


class _AskedOutbound(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, asked: _Asked) -> None:
        super().__init__(next)
        self._asked = asked

    def list_workflows(self, input: ListWorkflowsInput) -> WorkflowExecutionAsyncIterator:
        self._asked.last = input
        return super().list_workflows(input)


async def listing_read(tenant: str, what: str, rpc_timeout: timedelta, read: Awaitable[T]) -> T:
    """``read``, a request of a listing of ``tenant``'s Runs made with ``rpc_timeout``, not
    started before it is awaited here (a coroutine: its time is the request's). A cursor's
    first page (``Visibility.resumed``) may ask more than once; the time is then of all of
    them, each answered before the last failed: a timeout's status it ends with after
    another ask Temporal left unanswered is taken for silence, as that one was.

    Raises:
        TemporalUnanswered: Temporal did not answer it in time; its ``why`` names the
            listing and ``what`` was not read.
        TemporalCancelled: Temporal answered it at once with a timeout's status (a
            CANCELLED under load), saying the same.
    """
    asked_at = time.monotonic()
    try:
        return await read
    except RPCError as err:
        if unanswered(err) and not isinstance(err, TemporalUnanswered | TemporalCancelled):
            listing = f"tenant {tenant!r}'s Run listing"
            raise read_mapped(
                err, None, what, rpc_timeout, asked_at=asked_at, subject=listing
            ) from err
        raise


class Visibility:
    """A client's visibility pages (``RunListing`` reads through one), each request
    waiting ``rpc_timeout`` at most."""

    def __init__(self, client: Client, rpc_timeout: timedelta = TEMPORAL_READ_TIMEOUT) -> None:
        self._client = client
        self.rpc_timeout = rpc_timeout
        self._asked = _Asked()
        self._copy: Client | None = None

    async def page(self, query: str, size: int, token: bytes | None) -> Page:
        """One page, through ``Client.list_workflows`` (with the client's retries)."""
        listed = self._client.list_workflows(
            query, page_size=size, next_page_token=token, rpc_timeout=self.rpc_timeout
        )
        await listed.fetch_next_page()
        return Page([e.raw_info for e in listed.current_page or ()], listed.next_page_token)

    async def once(self, query: str, size: int, token: bytes | None) -> Page | None:
        """One page asked once, without the client's retries, as its interceptors ask it;
        None when they pass the call on only as its page is fetched (one that awaits a
        credential first, say: ``list_workflows`` is synchronous), which only the client's
        iterator, with its retries, asks."""
        # Synchronous from the call to the read: no other listing's request comes between.
        self._copied().list_workflows(
            query, page_size=size, next_page_token=token, rpc_timeout=self.rpc_timeout
        )
        asked = self._asked.take()
        if asked is None:
            return None
        request = ListWorkflowExecutionsRequest(
            namespace=self._client.namespace,
            page_size=asked.page_size,
            next_page_token=asked.next_page_token or b"",
            query=asked.query or "",
        )
        answer = await self._client.workflow_service.list_workflow_executions(
            request,
            retry=False,
            metadata=asked.rpc_metadata,
            timeout=asked.rpc_timeout or self.rpc_timeout,
        )
        return Page(answer.executions, answer.next_page_token or None)

    def _copied(self) -> Client:
        """The client with the same connection and interceptors, and ``_Asked`` last."""
        if self._copy is None:
            # The active config: what the client's plugins made of it, applied once.
            # Every key of it, so one a later SDK adds is kept; its plugins not run again.
            config = self._client.config(active_config=True)
            config["plugins"] = []
            config["interceptors"] = [*config["interceptors"], self._asked]
            self._copy = Client(**config)
        return self._copy

    async def resumed(self, query: str, size: int, token: bytes | None) -> Page:
        """The first page read from a cursor's token: asked once without the client's
        retries, so a token Temporal refuses is a ``BadCursor`` at once, not after the
        retries of a code they take as transient (UNKNOWN: ~10 s, ~9 failing queries).

        Raises:
            BadCursor: Temporal refused the token as unreadable (``_UNREADABLE_TOKEN``)
                twice, while it reads the same listing from its start in between.
            RPCError: Temporal did not answer the first try in time (``unanswered``),
                or refused the page asked again.
        """
        page: Page | None = None
        try:
            page = await self.once(query, size, token)
        except RPCError as err:
            if unanswered(err):
                raise  # Temporal's silence: asked again with the retries, twice the wait
            # UNKNOWN is also what a server in trouble may answer (SQL visibility: for any
            # internal error): the token is to blame only when the listing reads without
            # it and the token is refused again (two queries more, answered at once).
            if err.status in _UNREADABLE_TOKEN and await self._reads(query):
                try:
                    page = await self.once(query, size, token)
                except RPCError as again:
                    if again.status in _UNREADABLE_TOKEN:
                        raise BadCursor(
                            "Temporal cannot read the position this cursor holds (it "
                            f"answered {again.status.name}: {again.message!r}) though it "
                            "reads the same listing from its start: the cursor was made up, "
                            "or kept across a change of visibility store; start the listing "
                            "again without a cursor"
                        ) from again
        # Transient (UNAVAILABLE...), the listing fails without the cursor too, or the
        # interceptors pass the call on only as a page is fetched (``once``: None): asked
        # again as any page is, with the client's retries.
        return page if page is not None else await self.page(query, size, token)

    async def _reads(self, query: str) -> bool:
        """Whether Temporal answers ``query``'s first Run, asked once (False: not asked so,
        ``once``'s None)."""
        try:
            read = await self.once(query, 1, None)
        except RPCError:
            return False
        return read is not None
