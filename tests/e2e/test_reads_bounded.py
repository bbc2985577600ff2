"""A client read of Temporal that needs no worker (a describe, a page of history) waits its
timeout at most, then says which Run and what Temporal did not answer
(``TemporalUnanswered``; ``HistoryNotRead`` for a page of history), which REST answers
503 ``temporal``: the describe an A2A stream's close watch makes (``_closing.py``), a
follower's (``_follow.py``) and a live call's (``_live.py``), and the history read and the
describe of a dispatch sent again under its idempotency key. Temporal is the session's dev
server behind a gRPC relay that holds one method's calls unanswered on cue; each test is
bounded, as each read was not before."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import httpx
import pytest
from a2a.types import TaskState, TaskStatusUpdateEvent
from temporalio.client import Client

from psych_runtime.activities.versions import FileVersionStore
from psych_runtime.specs import AgentBuilder, AgentSpec, PermitSource, TenantPermits
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers.cli._resume import _warn_without_worker
from psych_runtime.workers.cli._run_facts import run_facts
from psych_runtime.workers.serve import AuthSettings, ServeSettings, create_app
from psych_runtime.workers.serve._problems import problem_of
from psych_runtime.workers.serve.a2a._closing import until_closed
from psych_runtime.workers.serve.a2a._latest import replaced_executions, runs_on
from psych_runtime.workers.serve.a2a._tasks import task_events
from psych_runtime.workflows import (
    TEMPORAL_READ_TIMEOUT,
    HistoryNotRead,
    PsychClient,
    RunStatus,
    TemporalUnanswered,
)
from psych_runtime.workflows.client._follow import RecordFollower
from psych_runtime.workflows.client._live import attempt_standing

from ..serve._app import ACME_KEY, KEYS, bearer
from ._grpc_relay import Relay, relayed
from ._short_reads import SHORT_READ
from ._waiting import eventually
from .conftest import Harness

pytestmark = pytest.mark.e2e

DESCRIBE = "DescribeWorkflowExecution"
HISTORY = "GetWorkflowExecutionHistory"
BOUND = TEMPORAL_READ_TIMEOUT.total_seconds() + 15
"""How long a test waits for a read that should end within ``TEMPORAL_READ_TIMEOUT``."""


@contextlib.asynccontextmanager
async def relayed_client(
    harness: Harness, permits: TenantPermits | None = None
) -> AsyncIterator[tuple[Relay, PsychClient]]:
    """A PsychClient of the harness's Temporal through a gRPC relay, sharing its Versions
    (dispatching through ``permits``)."""
    async with relayed(harness.env.client.service_client.config.target_host) as relay:
        env = harness.env.client
        temporal = await Client.connect(
            relay.target, namespace=env.namespace, data_converter=env.data_converter
        )
        yield (
            relay,
            PsychClient(
                temporal,
                store=FileVersionStore(harness.home / "versions"),
                task_queue=harness.settings.task_queue,
                registry=harness.registry,
                permits=permits,
            ),
        )


async def _settled_run(harness: Harness) -> tuple[str, AgentSpec]:
    """A Run that answered and settled; its workflow id and Spec."""
    spec = AgentBuilder(f"bounded{uuid.uuid4().hex[:8]}").model("fake-model").build()
    harness.fake.enqueue(Reply.text("done"))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        await harness.client.result(run, scope=harness.scope)
    return run.workflow_id, spec


async def _drained(items: AsyncIterator[object], seconds: float) -> None:
    """Read ``items`` to their end, ``seconds`` at most."""
    async with asyncio.timeout(seconds):
        async for _ in items:
            pass


async def _asking_run(harness: Harness, key: str) -> tuple[str, AgentSpec]:
    """A Run, dispatched under ``key``, that asked a question and waits for its answer (its
    execution open: the relay passes Temporal's errors on without their details, so a
    settled Run's "already started" would not read as one); its workflow id and Spec, which
    has an HTTP tool (a permits port is asked about it)."""
    spec = (
        AgentBuilder(f"bounded{uuid.uuid4().hex[:8]}")
        .model("fake-model")
        .http_tool("ping", description="Ping.", url="http://127.0.0.1:9/ping", method="GET")
        .suspension(may_ask_questions=True)
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("ask_question", {"question": "Which day?"}, id="q1"))
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope, idempotency_key=key)

        async def asking() -> bool:
            state = await harness.client.status(run, scope=harness.scope)
            return state.status is RunStatus.SUSPENDED

        await eventually(asking, what="the Run to ask")
    return run.workflow_id, spec


def _says_temporal(err: TemporalUnanswered, what: str, workflow_id: str) -> None:
    assert err.why.startswith(
        f"Temporal did not answer {what} of Run {workflow_id} within "
        f"{SHORT_READ.total_seconds():g} s ("
    ), err.why
    problem = problem_of(err)
    assert problem is not None
    assert (problem.status, problem.kind, problem.detail) == (503, "temporal", err.why)


@pytest.mark.timeout(120)
@pytest.mark.usefixtures("short_reads")
async def test_a_streams_close_watch_describe_not_answered_fails_the_stream(
    harness: Harness,
) -> None:
    workflow_id, _ = await _settled_run(harness)

    async def never() -> AsyncIterator[str]:
        await asyncio.Event().wait()
        yield "never"

    async with relayed_client(harness) as (relay, client):
        relay.hang(DESCRIBE)
        started = time.monotonic()
        stream = until_closed(never(), client.temporal, workflow_id, grace=1.0)
        with pytest.raises(TemporalUnanswered) as unanswered:
            await _drained(stream, 15)
    assert time.monotonic() - started < 10
    assert relay.held[:1] == [DESCRIBE]
    assert unanswered.value.why.startswith(
        f"Temporal did not answer a describe of Run {workflow_id} within 1 s ("
    )


@pytest.mark.timeout(120)
@pytest.mark.usefixtures("short_reads")
async def test_a_followers_describe_not_answered_says_so_within_the_timeout(
    harness: Harness,
) -> None:
    workflow_id, _ = await _settled_run(harness)
    async with relayed_client(harness) as (relay, client):
        relay.hang(DESCRIBE)
        follower = RecordFollower(client.temporal, workflow_id)
        records = follower.records()
        started = time.monotonic()
        with pytest.raises(TemporalUnanswered) as unanswered:
            await _drained(records, BOUND)
        assert time.monotonic() - started < BOUND - 5
        _says_temporal(unanswered.value, "a describe", workflow_id)

        # A live call's describe too (where a follower starting late finds an attempt).
        with pytest.raises(TemporalUnanswered) as standing:
            async with asyncio.timeout(BOUND):
                await attempt_standing(client.temporal, workflow_id, "call-1")
        _says_temporal(standing.value, "a describe", workflow_id)


@pytest.mark.timeout(150)
@pytest.mark.usefixtures("short_reads")
async def test_a_dispatch_sent_again_whose_reads_are_not_answered_says_which(
    harness: Harness,
) -> None:
    key = f"k-{uuid.uuid4().hex[:8]}"
    workflow_id, spec = await _asking_run(harness, key)
    async with relayed_client(harness) as (relay, client):
        # The input the key's Run was started with: its history's first event.
        relay.hang(HISTORY)
        started = time.monotonic()
        with pytest.raises(HistoryNotRead) as unread:
            async with asyncio.timeout(BOUND):
                await client.dispatch(spec, "go", scope=harness.scope, idempotency_key=key)
        assert time.monotonic() - started < BOUND - 5
        _says_temporal(unread.value, "a page of the history", workflow_id)
        assert unread.value.events_read == 0

        # What the key's Run runs (its search attributes): a describe.
        relay.hung.clear()
        relay.hang(DESCRIBE)
        with pytest.raises(TemporalUnanswered) as undescribed:
            async with asyncio.timeout(BOUND):
                await client.dispatch(spec, "go", scope=harness.scope, idempotency_key=key)
        _says_temporal(undescribed.value, "a describe", workflow_id)
        assert relay.held == [HISTORY, DESCRIBE]

    # Whether the key's Run was started already, asked when the permits port failed.
    async with relayed_client(harness, permits=_Down()) as (relay, client):
        relay.hang(DESCRIBE)
        with pytest.raises(TemporalUnanswered) as unasked:
            async with asyncio.timeout(BOUND):
                await client.dispatch(spec, "go", scope=harness.scope, idempotency_key=key)
        _says_temporal(unasked.value, "a describe", workflow_id)
        assert relay.held == [DESCRIBE]


@pytest.mark.timeout(120)
async def test_an_a2a_streams_end_reads_within_the_grace(harness: Harness) -> None:
    workflow_id, _ = await _settled_run(harness)
    grace = timedelta(seconds=2)
    async with harness.worker(), relayed_client(harness) as (relay, client):
        last = (await client.records(workflow_id, scope=harness.scope)).last_seq
        # Past the follower's and the close watch's describes, the one of its end's
        # closed read (``PsychClient.closed``) is held; its state, a query, is answered.
        relay.hang(DESCRIBE, after=2)
        events = task_events(
            client,
            workflow_id,
            scope=harness.scope,
            after=last,
            deltas=False,
            through_input=False,
            grace=grace,
        )
        started = time.monotonic()
        async with asyncio.timeout(BOUND):
            ended = [event async for event in events]
        # The grace, not ``TEMPORAL_READ_TIMEOUT``: the serve's query timeout bounds it.
        assert time.monotonic() - started < TEMPORAL_READ_TIMEOUT.total_seconds() - 2
    assert relay.held == [DESCRIBE]
    final = ended[-1]
    assert isinstance(final, TaskStatusUpdateEvent)
    assert final.status.state == TaskState.TASK_STATE_COMPLETED


@pytest.mark.timeout(120)
@pytest.mark.usefixtures("short_reads")
async def test_a_rest_event_stream_whose_run_is_not_described_is_a_503(harness: Harness) -> None:
    workflow_id, _ = await _settled_run(harness)
    async with relayed_client(harness) as (relay, client):
        relay.hang(DESCRIBE)
        settings = ServeSettings(client, AuthSettings(KEYS), query_timeout_seconds=1.0)
        transport = httpx.ASGITransport(app=create_app(settings))
        async with httpx.AsyncClient(transport=transport, base_url="http://api.test") as http:
            started = time.monotonic()
            async with asyncio.timeout(BOUND):
                answer = await http.get(f"/v1/runs/{workflow_id}/events", headers=bearer(ACME_KEY))
        assert time.monotonic() - started < 8
    assert answer.status_code == 503
    problem = answer.json()
    assert problem["detail"].startswith(
        f"Temporal did not answer a describe of Run {workflow_id} within 1 s ("
    )
    assert problem["type"].endswith("temporal")


@pytest.mark.timeout(120)
@pytest.mark.usefixtures("short_reads")
async def test_the_clis_describes_of_a_run_are_bounded(harness: Harness) -> None:
    workflow_id, _ = await _settled_run(harness)
    async with relayed_client(harness) as (relay, client):
        relay.hang(DESCRIBE)
        with pytest.raises(TemporalUnanswered) as facts:
            async with asyncio.timeout(BOUND):
                await run_facts(client.temporal, workflow_id, scope=harness.scope)
        _says_temporal(facts.value, "a describe", workflow_id)
        # Whether a worker polls, before a resume: not said when Temporal does not answer.
        started = time.monotonic()
        async with asyncio.timeout(BOUND):
            await _warn_without_worker(client.temporal, workflow_id)
        assert time.monotonic() - started < BOUND - 5
        assert relay.held == [DESCRIBE, DESCRIBE]


class _Down:
    """A permits port that fails whenever it is asked."""

    async def permitted(self, tenant: str, source: PermitSource) -> tuple[str, ...] | None:
        raise ConnectionError("the permits port is down")


@pytest.mark.timeout(120)
@pytest.mark.usefixtures("short_reads")
async def test_a2a_describes_of_a_runs_latest_execution_not_answered_say_so(
    harness: Harness,
) -> None:
    workflow_id, _ = await _settled_run(harness)
    (summary,) = [
        run
        for run in await harness.client.list(scope=harness.scope, limit=50)
        if run.workflow_id == workflow_id
    ]
    async with relayed_client(harness) as (relay, client):
        relay.hang(DESCRIBE)
        with pytest.raises(TemporalUnanswered) as running:
            async with asyncio.timeout(BOUND):
                await runs_on(client.temporal, workflow_id)
        _says_temporal(running.value, "a describe", workflow_id)
        with pytest.raises(TemporalUnanswered) as latest:
            async with asyncio.timeout(BOUND):
                await replaced_executions(client.temporal, [summary], at_once=2)
        _says_temporal(latest.value, "a describe", workflow_id)
