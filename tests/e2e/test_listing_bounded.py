"""The reads of Temporal that name no single Run wait a bound too: each request of a Run
listing (its first, its pages, a cursor's page asked once, the look past a full page, the
count), the CLI's describe of a task queue (whether a worker polls it) and ``psych
status``'s describe of the Run whose unpolled queues it names wait
``TEMPORAL_READ_TIMEOUT`` at most, then say what Temporal did not answer of what
(``TemporalUnanswered`` whose ``subject`` is the tenant's Run listing, or the task queue),
which REST answers 503 ``temporal`` and ``psych list`` prints as one line. A live call
whose describe Temporal does not answer says so in the log (it raised nothing, and no drop
said it). Temporal is the session's dev server behind a gRPC relay that holds one
method's calls unanswered on cue; each test is bounded, as each read was not before."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.testing import WorkflowEnvironment

from psych_runtime.activities.versions import FileVersionStore
from psych_runtime.specs import Scope
from psych_runtime.workers.cli._main import main
from psych_runtime.workers.cli._run_facts import has_worker
from psych_runtime.workers.fleet import unpolled_queues
from psych_runtime.workers.serve import AuthSettings, ServeSettings, create_app
from psych_runtime.workers.serve._problems import problem_of
from psych_runtime.workflows import PsychClient, TemporalUnanswered
from psych_runtime.workflows.client._live import LiveCall, RelayClients
from psych_runtime.workflows.contract._contract import SA_TENANT

from ..serve._app import ACME_KEY, KEYS, bearer
from ._grpc_relay import Relay, relayed
from ._short_reads import SHORT_READ
from ._waiting import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("short_reads")]

LIST = "ListWorkflowExecutions"
COUNT = "CountWorkflowExecutions"
SECONDS = SHORT_READ.total_seconds()
BOUND = SECONDS + 15
"""How long a test waits for a read that should end within ``TEMPORAL_READ_TIMEOUT``."""
FIRST = "the first request (where it starts)"


@contextlib.asynccontextmanager
async def relayed_client(
    env: WorkflowEnvironment, tmp_path: Path
) -> AsyncIterator[tuple[Relay, PsychClient]]:
    """A PsychClient of the session's Temporal through a gRPC relay."""
    async with relayed(env.client.service_client.config.target_host) as relay:
        temporal = await Client.connect(
            relay.target, namespace=env.client.namespace, data_converter=env.client.data_converter
        )
        yield relay, PsychClient(temporal, store=FileVersionStore(tmp_path / "versions"))


def _says_listing(err: TemporalUnanswered, what: str, tenant: str) -> None:
    assert err.workflow_id is None
    assert err.why.startswith(
        f"Temporal did not answer {what} of tenant {tenant!r}'s Run listing within {SECONDS:g} s ("
    ), err.why
    problem = problem_of(err)
    assert problem is not None
    assert (problem.status, problem.kind, problem.detail) == (503, "temporal", err.why)


async def _two_runs(client: Client, tenant: str) -> list[str]:
    """Two executions listed as ``tenant``'s Runs (no worker takes them), once the
    visibility store shows both; their workflow ids."""
    ids = [f"psych-{tenant}-{uuid.uuid4().hex}" for _ in range(2)]
    attributes = TypedSearchAttributes(
        [SearchAttributePair(SearchAttributeKey.for_keyword(SA_TENANT), tenant)]
    )
    for workflow_id in ids:
        await client.start_workflow(
            "AgentRun",
            id=workflow_id,
            task_queue=f"nobody-{uuid.uuid4().hex[:8]}",
            search_attributes=attributes,
        )
    for _ in range(80):  # the visibility store catches up shortly after
        if (await client.count_workflows(f"{SA_TENANT} = '{tenant}'")).count == len(ids):
            return ids
        await asyncio.sleep(0.25)
    raise AssertionError(f"the visibility store never showed both Runs of {tenant}")


@pytest.mark.timeout(180)
async def test_a_listings_requests_not_answered_say_which_within_the_timeout(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    scope = Scope(tenant=f"t{uuid.uuid4().hex[:10]}")
    ids = await _two_runs(dev_env.client, scope.tenant)
    try:
        async with relayed_client(dev_env, tmp_path) as (relay, client):
            # Its first request: where the listing starts (the tenant's last continue).
            relay.hang(LIST)
            started = time.monotonic()
            with pytest.raises(TemporalUnanswered) as first:
                async with asyncio.timeout(BOUND):
                    await client.list(scope=scope)
            assert time.monotonic() - started < SECONDS + 5
            _says_listing(first.value, FIRST, scope.tenant)

            # A page.
            relay.hung[LIST] = 1
            with pytest.raises(TemporalUnanswered) as page:
                async with asyncio.timeout(BOUND):
                    await client.list_page(scope=scope, limit=1)
            _says_listing(page.value, "a page", scope.tenant)

            # The look past a full page (so the last page has no cursor).
            relay.hung[LIST] = 2
            with pytest.raises(TemporalUnanswered) as ahead:
                async with asyncio.timeout(BOUND):
                    await client.list_page(scope=scope, limit=2)
            _says_listing(ahead.value, "the look past a full page", scope.tenant)

            # A cursor's page, asked once without the client's retries: not asked again
            # with them (twice the wait).
            relay.hung.clear()
            cursor = (await client.list_page(scope=scope, limit=1)).next_cursor
            assert cursor is not None
            relay.hang(LIST)
            started = time.monotonic()
            with pytest.raises(TemporalUnanswered) as resumed:
                async with asyncio.timeout(BOUND):
                    await client.list_page(scope=scope, limit=1, cursor=cursor)
            assert time.monotonic() - started < SECONDS + 5
            _says_listing(resumed.value, "a page", scope.tenant)

            relay.hang(COUNT)
            with pytest.raises(TemporalUnanswered) as count:
                async with asyncio.timeout(BOUND):
                    await client.count(scope=scope)
            _says_listing(count.value, "the count", scope.tenant)
            assert relay.held == [LIST, LIST, LIST, LIST, COUNT]
    finally:
        for workflow_id in ids:
            await dev_env.client.get_workflow_handle(workflow_id).terminate()


@pytest.mark.timeout(120)
async def test_a_rest_listing_not_answered_is_a_503(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    async with relayed_client(dev_env, tmp_path) as (relay, client):
        relay.hang(LIST)
        settings = ServeSettings(client, AuthSettings(KEYS), query_timeout_seconds=1.0)
        transport = httpx.ASGITransport(app=create_app(settings))
        async with httpx.AsyncClient(transport=transport, base_url="http://api.test") as http:
            async with asyncio.timeout(BOUND):
                answer = await http.get("/v1/runs", headers=bearer(ACME_KEY))
    assert answer.status_code == 503, answer.text
    problem = answer.json()
    assert problem["type"].endswith("temporal")
    assert problem["detail"].startswith(
        f"Temporal did not answer {FIRST} of tenant 'acme''s Run listing within {SECONDS:g} s ("
    ), problem["detail"]


@pytest.mark.timeout(120)
async def test_psych_list_not_answered_says_so_in_one_line(
    dev_env: WorkflowEnvironment, capsys: pytest.CaptureFixture[str]
) -> None:
    async with relayed(dev_env.client.service_client.config.target_host) as relay:
        relay.hang(LIST)
        argv = ["list", "--address", relay.target, "--tenant", "acme"]
        async with asyncio.timeout(BOUND):
            status = await asyncio.to_thread(main, argv)
    assert status == 1
    err = capsys.readouterr().err
    assert err.startswith(
        f"psych: Temporal did not answer {FIRST} of tenant 'acme''s Run listing within "
        f"{SECONDS:g} s ("
    ), err
    assert len(err.splitlines()) == 1, err


@pytest.mark.timeout(120)
async def test_whether_a_worker_polls_not_answered_names_what_was_not_read(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    async with relayed_client(dev_env, tmp_path) as (relay, client):
        relay.hang("DescribeTaskQueue")
        started = time.monotonic()
        with pytest.raises(TemporalUnanswered) as unanswered:
            async with asyncio.timeout(BOUND):
                await has_worker(client.temporal, "orders")
        assert time.monotonic() - started < SECONDS + 5
        assert unanswered.value.why.startswith(
            f"Temporal did not answer a describe of task queue 'orders' within {SECONDS:g} s ("
        ), unanswered.value.why

        # ``psych status``'s look for the queues a Run waits on that no worker polls.
        relay.hang("DescribeWorkflowExecution")
        workflow_id = f"psych-acme-{uuid.uuid4().hex}"  # never asked of Temporal: held
        with pytest.raises(TemporalUnanswered) as undescribed:
            async with asyncio.timeout(BOUND):
                await unpolled_queues(client.temporal, workflow_id)
        assert undescribed.value.why.startswith(
            f"Temporal did not answer a describe of Run {workflow_id} within {SECONDS:g} s ("
        ), undescribed.value.why


@pytest.mark.timeout(120)
async def test_a_live_calls_describe_not_answered_is_logged(
    dev_env: WorkflowEnvironment, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="psych_runtime.workflows.client._live")
    workflow_id = f"psych-acme-{uuid.uuid4().hex}"  # never asked of Temporal: held
    emitted: list[object] = []
    async with relayed_client(dev_env, tmp_path) as (relay, client):
        relay.hang("DescribeWorkflowExecution")
        http = RelayClients()
        live = LiveCall(client.temporal, workflow_id, None, emitted.append, http)

        async def ended() -> bool:
            return live.done

        try:
            await eventually(ended, within=BOUND, what="the live call to end")
        finally:
            await live.finish(0)
            await http.aclose()
    assert emitted == []  # no attempt was found: no drop says it
    why = f"Temporal did not answer a describe of Run {workflow_id} within {SECONDS:g} s ("
    (logged,) = [r for r in caplog.records if r.name == "psych_runtime.workflows.client._live"]
    assert logged.levelno == logging.WARNING
    assert logged.getMessage().startswith(
        f"following the deltas of Run {workflow_id}'s pending model call failed; its "
        f"records go on without them: {why}"
    ), logged.getMessage()
    assert live.failure is not None and live.failure.startswith(why), live.failure
