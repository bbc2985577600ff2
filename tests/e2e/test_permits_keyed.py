"""A dispatch retried under its idempotency key while the tenant permits port is down: the
key's Run started already, so the retry answers with it (it starts nothing, and needs no
permit), as after a revocation; a dispatch that would start a Run is PermitsUnavailable."""

from __future__ import annotations

import pytest

from psych_runtime.specs import AgentBuilder, PermitSource, PermitsUnavailable, StaticPermits
from psych_runtime.testing import Reply
from psych_runtime.workers import run_worker
from psych_runtime.workflows import RunStatus

from ._permits import checking_client
from .conftest import Harness

pytestmark = pytest.mark.e2e


class Down:
    """A ``TenantPermits`` whose tenant service is down: every question raises."""

    async def permitted(self, tenant: str, source: PermitSource) -> tuple[str, ...] | None:
        raise ConnectionError("tenant service down")


def lookup_order(order_id: str) -> str:
    """Look up an order."""
    return f"order {order_id}: delivered"


async def test_a_key_that_started_a_run_answers_with_it_while_the_permits_port_is_down(
    harness: Harness,
) -> None:
    client = checking_client(harness, StaticPermits())  # the port answers: nothing restricted
    looker = (
        AgentBuilder("looker", registry=harness.registry).model("fake-model").tool(lookup_order)
    ).build()
    harness.fake.enqueue(Reply.text("looked"))
    async with run_worker(harness.env.client, harness.settings):
        first = await client.dispatch(looker, "Look", scope=harness.scope, idempotency_key="k1")
        result = await client.result(first, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    # The tenant service goes down; the client that lost the answer retries under its key.
    client.permits = Down()
    again = await client.dispatch(looker, "Look", scope=harness.scope, idempotency_key="k1")
    assert again == first
    # What would start a Run cannot be checked: refused, naming the port's error.
    down = r"could not be asked: ConnectionError: tenant service down"
    with pytest.raises(PermitsUnavailable, match=down):
        await client.dispatch(looker, "Look", scope=harness.scope, idempotency_key="k2")
    with pytest.raises(PermitsUnavailable, match=down):
        await client.dispatch(looker, "Look", scope=harness.scope)
