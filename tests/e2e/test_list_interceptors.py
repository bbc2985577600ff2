"""A listing goes through the Temporal client's interceptors: one on ``list_workflows``
(auth, a tenancy rewrite of the query, audit, tracing) sees every request of it, and its
rewrite is what Temporal answers, a cursor's page (asked once, without the client's
retries) too; a position Temporal cannot read is still refused at once. A real client
with such an interceptor, through a relay that counts the requests, on the session dev
server."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Sequence

import grpc
import pytest
from temporalio.client import (
    Interceptor,
    ListWorkflowsInput,
    OutboundInterceptor,
    WorkflowExecution,
    WorkflowExecutionAsyncIterator,
)
from temporalio.plugin import SimplePlugin

from psych_runtime.specs import BadCursor

from ._grpc_relay import relayed
from ._listing import started_runs
from .conftest import Harness
from .test_list_pages import LIST, forged, relayed_client

pytestmark = pytest.mark.e2e


class Hiding(Interceptor):
    """Hides one workflow id from every listing (as a tenancy rewrite would), and keeps
    each listing request it was asked."""

    def __init__(self, hidden: str) -> None:
        self.hidden = hidden
        self.asked: list[ListWorkflowsInput] = []

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _HidingOutbound(next, self)


class _HidingOutbound(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, hiding: Hiding) -> None:
        super().__init__(next)
        self._hiding = hiding

    def list_workflows(self, input: ListWorkflowsInput) -> WorkflowExecutionAsyncIterator:
        self._hiding.asked.append(input)
        query = f"({input.query}) AND WorkflowId != '{self._hiding.hidden}'"
        return super().list_workflows(dataclasses.replace(input, query=query))


@pytest.mark.parametrize("given", ["interceptors", "plugins"])
async def test_every_request_of_a_listing_goes_through_the_clients_interceptors(
    harness: Harness, given: str
) -> None:
    # Given as a plugin, the interceptor is in the client's active config only: the copy
    # the cursor's page is asked through (``_visibility.py``) has it too.
    agent = f"seen{uuid.uuid4().hex[:8]}"
    target = harness.env.client.service_client.config.target_host
    async with (
        started_runs(harness, harness.scope.tenant, agent, 3) as ids,
        relayed(target) as relay,
    ):
        hiding = Hiding(ids[1])
        if given == "plugins":
            client = await relayed_client(
                harness, relay, plugins=[SimplePlugin("hiding", interceptors=[hiding])]
            )
        else:
            client = await relayed_client(harness, relay, interceptors=[hiding])
        first = await client.list_page(scope=harness.scope, agent=agent, limit=1)
        assert [run.workflow_id for run in first.runs] == [ids[2]]
        assert first.next_cursor is not None
        # The cursor's page is asked once without retries, as the interceptor rewrote it.
        rest = await client.list_page(
            scope=harness.scope, agent=agent, limit=1, cursor=first.next_cursor
        )
        assert [run.workflow_id for run in rest.runs] == [ids[0]]
        assert rest.next_cursor is None
        whole = await client.list(scope=harness.scope, agent=agent)
        assert [run.workflow_id for run in whole] == [ids[2], ids[0]]
        # Every request Temporal was asked, the interceptor was asked first.
        assert len(hiding.asked) == len(relay.of(LIST)) > 0
        assert all(
            f"PsychTenant = '{harness.scope.tenant}'" in (a.query or "") for a in hiding.asked
        )

        # A position Temporal cannot read: refused at once, each request the interceptor's.
        before = len(relay.of(LIST))
        with pytest.raises(BadCursor, match="it answered UNKNOWN"):
            await client.list_page(
                scope=harness.scope, agent=agent, cursor=forged(first.next_cursor, b"?")
            )
        unknown, ok = grpc.StatusCode.UNKNOWN, grpc.StatusCode.OK
        assert relay.of(LIST)[before:] == [unknown, ok, unknown]
        assert len(hiding.asked) == len(relay.of(LIST))


class Deferring(Interceptor):
    """Passes a listing on only as its page is fetched, as an interceptor that must await
    something first (a credential, a rate limit: ``list_workflows`` is synchronous) does;
    hides one workflow id, and counts the pages it passed on."""

    def __init__(self, hidden: str) -> None:
        self.hidden = hidden
        self.passed = 0

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _DeferringOutbound(next, self)


class _DeferringOutbound(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, deferring: Deferring) -> None:
        super().__init__(next)
        self._deferring = deferring

    def list_workflows(self, input: ListWorkflowsInput) -> WorkflowExecutionAsyncIterator:
        query = f"({input.query}) AND WorkflowId != '{self._deferring.hidden}'"
        return _Deferred(self.next, dataclasses.replace(input, query=query), self._deferring)


class _Deferred(WorkflowExecutionAsyncIterator):
    """The iterator of the next interceptor, asked for when a page is fetched."""

    def __init__(
        self, next: OutboundInterceptor, input: ListWorkflowsInput, deferring: Deferring
    ) -> None:
        self._next_outbound = next
        self._asked = input
        self._deferring = deferring
        self._inner: WorkflowExecutionAsyncIterator | None = None

    async def fetch_next_page(self, *, page_size: int | None = None) -> None:
        await asyncio.sleep(0)  # what it awaits before the request
        self._deferring.passed += 1
        if self._inner is None:
            self._inner = self._next_outbound.list_workflows(self._asked)
        await self._inner.fetch_next_page(page_size=page_size)

    @property
    def current_page(self) -> Sequence[WorkflowExecution] | None:
        return None if self._inner is None else self._inner.current_page

    @property
    def next_page_token(self) -> bytes | None:
        return self._asked.next_page_token if self._inner is None else self._inner.next_page_token


async def test_a_cursors_page_through_an_interceptor_that_passes_it_on_as_it_is_fetched(
    harness: Harness,
) -> None:
    # The cursor's page, asked once without retries, is read from the request as the
    # interceptors pass it on when it is asked: this one passes it on only when the page is
    # fetched, so the page is fetched as any other (with the client's retries), through
    # it. Failed with a RuntimeError (a 500) on every cursor.
    agent = f"deferred{uuid.uuid4().hex[:8]}"
    target = harness.env.client.service_client.config.target_host
    async with (
        started_runs(harness, harness.scope.tenant, agent, 3) as ids,
        relayed(target) as relay,
    ):
        deferring = Deferring(ids[1])
        client = await relayed_client(harness, relay, interceptors=[deferring])
        first = await client.list_page(scope=harness.scope, agent=agent, limit=1)
        assert [run.workflow_id for run in first.runs] == [ids[2]]
        assert first.next_cursor is not None
        rest = await client.list_page(
            scope=harness.scope, agent=agent, limit=1, cursor=first.next_cursor
        )
        assert [run.workflow_id for run in rest.runs] == [ids[0]]
        assert rest.next_cursor is None
        assert deferring.passed == len(relay.of(LIST))
