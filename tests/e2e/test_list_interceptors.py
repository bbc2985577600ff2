"""A listing goes through the Temporal client's interceptors: one on ``list_workflows``
(auth, a tenancy rewrite of the query, audit, tracing) sees every request of it, and its
rewrite is what Temporal answers, a cursor's page (asked once, without the client's
retries) too; a position Temporal cannot read is still refused at once. A real client
with such an interceptor, through a relay that counts the requests, on the session dev
server."""

from __future__ import annotations

import dataclasses
import uuid

import grpc
import pytest
from temporalio.client import (
    Interceptor,
    ListWorkflowsInput,
    OutboundInterceptor,
    WorkflowExecutionAsyncIterator,
)

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


async def test_every_request_of_a_listing_goes_through_the_clients_interceptors(
    harness: Harness,
) -> None:
    agent = f"seen{uuid.uuid4().hex[:8]}"
    target = harness.env.client.service_client.config.target_host
    async with (
        started_runs(harness, harness.scope.tenant, agent, 3) as ids,
        relayed(target) as relay,
    ):
        hiding = Hiding(ids[1])
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
