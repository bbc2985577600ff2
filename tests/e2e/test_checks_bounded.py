"""The reads of Temporal the bounded reads of 12-07 left unbounded (a review of them): every
CLI command's namespace check, a worker's start's check of its fleet's approval policy (its
DescribeTaskQueue), and a suspended listing's reads of a Run's state, which said "no worker
answered" of Temporal's own silence. Each against the session dev server behind the gRPC
relay, which holds one method's calls unanswered; each bounded, as the read was not."""

from __future__ import annotations

import argparse
import asyncio
import pickle
import re
import time
import uuid

import grpc
import httpx
import pytest
from a2a.utils.errors import InternalError
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.client import Client
from temporalio.service import RPCError

from psych_runtime.activities.tools import RulePolicy
from psych_runtime.specs import PsychError
from psych_runtime.workers.cli._main import _temporal_refusal
from psych_runtime.workers.cli._runs import temporal_client
from psych_runtime.workers.fleet._policy import DESCRIBE_TRIES, check_fleet_policy
from psych_runtime.workers.fleet._pollers import has_live_poller
from psych_runtime.workers.serve import AuthSettings, ServeSettings, create_app
from psych_runtime.workers.serve.a2a._errors import a2a_error
from psych_runtime.workflows import TemporalCancelled, TemporalUnanswered, describe_within
from psych_runtime.workflows.client._listing import LIST_QUERY_SECONDS

from ..serve._app import ACME_KEY, KEYS, bearer
from ._grpc_relay import relayed
from ._short_reads import SHORT_READ
from .conftest import Harness
from .test_quick_cancels import _says_cancelled
from .test_reads_bounded import BOUND, DESCRIBE, _asking_run, relayed_client

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("short_reads")]

SECONDS = SHORT_READ.total_seconds()


@pytest.mark.timeout(120)
async def test_a_commands_namespace_check_not_answered_ends_saying_so(harness: Harness) -> None:
    # Every command connects through ``temporal_client``, which describes the namespace
    # with no timeout: a server that accepted the call and never answered hung it.
    namespace = harness.env.client.namespace
    async with relayed(harness.env.client.service_client.config.target_host) as relay:
        relay.hang("DescribeNamespace")
        args = argparse.Namespace(address=relay.target, namespace=namespace)
        started = time.monotonic()
        with pytest.raises(TemporalUnanswered) as unanswered:
            async with asyncio.timeout(BOUND):
                await temporal_client(args)
        assert time.monotonic() - started < BOUND - 5
    assert relay.held == ["DescribeNamespace"]
    assert unanswered.value.why.startswith(
        f"Temporal did not answer a describe of namespace {namespace!r} within {SECONDS:g} s ("
    ), unanswered.value.why
    # One line, saying it as it is: Temporal did not answer (it refused nothing).
    assert _temporal_refusal(unanswered.value) == f"psych: {unanswered.value.why}"


@pytest.mark.parametrize("status", [grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED])
async def test_a_namespace_check_answered_at_once_is_not_called_silence(
    harness: Harness, status: grpc.StatusCode
) -> None:
    # A server under load answers CANCELLED (or DEADLINE_EXCEEDED) at once: that is its
    # answer, not its silence, and is not worded "did not answer ... within 4 s"; nor
    # "Temporal refused ... (CANCELLED)": it gave the describe up, as a client read says.
    namespace = harness.env.client.namespace
    async with relayed(harness.env.client.service_client.config.target_host) as relay:
        relay.fail_next("DescribeNamespace", status)
        args = argparse.Namespace(address=relay.target, namespace=namespace)
        with pytest.raises(RPCError) as failed:
            async with asyncio.timeout(BOUND):
                await temporal_client(args)
    assert relay.of("DescribeNamespace") == [status]
    _says_cancelled(failed.value, status, "a describe", f"namespace {namespace!r}")


@pytest.mark.parametrize("status", [grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED])
async def test_a_runs_describe_answered_at_once_is_not_called_silence(
    harness: Harness, status: grpc.StatusCode
) -> None:
    # ``describe_within`` took every timeout's status for Temporal's silence: one answered
    # at once was worded "did not answer a describe ... within 4 s".
    async with relayed_client(harness) as (relay, client):
        relay.fail_next(DESCRIBE, status)
        handle = client.temporal.get_workflow_handle("psych-acme-r1")
        with pytest.raises(RPCError) as failed:
            async with asyncio.timeout(BOUND):
                await describe_within(handle, "psych-acme-r1", SHORT_READ)
    assert relay.of(DESCRIBE) == [status]
    assert not isinstance(failed.value, TemporalUnanswered), failed.value
    assert failed.value.status.name == status.name


@pytest.mark.parametrize("status", [grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED])
async def test_a_describe_answered_at_once_is_a_503_saying_temporal_cancelled_it(
    harness: Harness, status: grpc.StatusCode
) -> None:
    # Raised as a bare RPCError, REST's problems took its status for a query's timeout:
    # 503 ``no-worker``, "no worker answered", of a describe no worker answers (here the
    # event stream's check that the Run exists).
    workflow_id = f"psych-acme-{uuid.uuid4().hex[:8]}"
    async with relayed_client(harness) as (relay, client):
        relay.fail_next(DESCRIBE, status)
        settings = ServeSettings(client, AuthSettings(KEYS), query_timeout_seconds=SECONDS)
        transport = httpx.ASGITransport(app=create_app(settings))
        async with httpx.AsyncClient(transport=transport, base_url="http://api.test") as http:
            async with asyncio.timeout(BOUND):
                answer = await http.get(f"/v1/runs/{workflow_id}/events", headers=bearer(ACME_KEY))
    assert relay.of(DESCRIBE) == [status]
    assert answer.status_code == 503, answer.text
    problem = answer.json()
    assert problem["type"] == "urn:psych:problem:temporal", problem
    assert problem["detail"].startswith(
        f"Temporal cancelled a describe of Run {workflow_id} at once ({status.name}: "
    ), problem
    assert problem["detail"].endswith(
        "): it gave the read up (under load, say) rather than not answering; send the request again"
    ), problem
    # The error itself: the same words as the CLI's one line and A2A's error.
    async with relayed_client(harness) as (relay, client):
        relay.fail_next(DESCRIBE, status)
        handle = client.temporal.get_workflow_handle(workflow_id)
        with pytest.raises(TemporalCancelled) as failed:
            await describe_within(handle, workflow_id, SHORT_READ)
    assert failed.value.why == problem["detail"]
    assert _temporal_refusal(failed.value) == f"psych: {problem['detail']}"
    said = a2a_error(failed.value)
    assert isinstance(said, InternalError) and said.message == problem["detail"]
    assert said.data == {"type": "urn:psych:problem:temporal", "status": "503"}
    copy = pickle.loads(pickle.dumps(failed.value))
    assert (type(copy), copy.why, copy.status) == (
        TemporalCancelled,
        failed.value.why,
        failed.value.status,
    )


@pytest.mark.parametrize("status", [grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED])
async def test_a_queues_pollers_answered_at_once_are_not_called_silence(
    harness: Harness, status: grpc.StatusCode
) -> None:
    # ``has_live_poller`` (``psych status``'s and a resume's check of a worker) did the same,
    # and then printed it "Temporal refused ... (CANCELLED)".
    async with relayed_client(harness) as (relay, client):
        relay.fail_next("DescribeTaskQueue", status)
        with pytest.raises(RPCError) as failed:
            async with asyncio.timeout(BOUND):
                await has_live_poller(client.temporal, "q", TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW)
    assert relay.of("DescribeTaskQueue") == [status]
    _says_cancelled(failed.value, status, "a describe", "task queue 'q'")


@pytest.mark.parametrize("status", [grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED])
async def test_a_fleet_policy_check_answered_at_once_past_its_tries_is_not_a_refusal(
    harness: Harness, status: grpc.StatusCode
) -> None:
    # A worker's start asks its queue's pollers again on a timeout's status Temporal
    # answers at once; past the tries it raised that bare RPCError, which the worker's
    # start printed "Temporal refused: ... (CANCELLED)": it refused nothing, it gave the
    # describe up, as ``has_live_poller`` and a command's namespace check say.
    queue = harness.settings.task_queue
    async with relayed(harness.env.client.service_client.config.target_host) as relay:
        client = await Client.connect(relay.target, namespace=harness.env.client.namespace)
        relay.fail_next("DescribeTaskQueue", status, times=DESCRIBE_TRIES)
        with pytest.raises(RPCError) as failed:
            async with asyncio.timeout(BOUND):
                await check_fleet_policy(client, queue, RulePolicy())
    assert relay.of("DescribeTaskQueue") == [status] * DESCRIBE_TRIES
    _says_cancelled(failed.value, status, "a describe", f"task queue {queue!r}")


@pytest.mark.timeout(120)
async def test_a_connect_whose_first_call_is_not_answered_ends_saying_so(
    harness: Harness,
) -> None:
    # ``Client.connect`` asks GetSystemInfo once connected: the SDK bounds it (30 s,
    # measured; a CANCELLED "Timeout expired" it does not retry). The command says so, not
    # "is a server running?": something accepted the connection.
    async with relayed(harness.env.client.service_client.config.target_host) as relay:
        relay.hang("GetSystemInfo")
        args = argparse.Namespace(address=relay.target, namespace=harness.env.client.namespace)
        started = time.monotonic()
        with pytest.raises(PsychError) as unanswered:
            async with asyncio.timeout(60):
                await temporal_client(args)
        assert time.monotonic() - started < 45
    assert relay.held == ["GetSystemInfo"]
    # The parenthesis is the SDK's own words for its deadline, which vary ("Timeout
    # expired", "Deadline Exceeded": seen under load), so only its place is checked.
    assert re.fullmatch(
        re.escape(
            f"cannot connect to Temporal at {relay.target}: Temporal did not answer its first "
            "call (GetSystemInfo) in time ("
        )
        + r"[^()]+"
        + re.escape(
            "); the connection was accepted, so a server or a proxy listens there but does "
            "not answer"
        ),
        str(unanswered.value),
    )


@pytest.mark.timeout(120)
async def test_a_workers_fleet_policy_check_not_answered_ends_saying_so(
    harness: Harness,
) -> None:
    # A worker's start asks which workers poll its queues (DescribeTaskQueue), with no
    # timeout and again on a timeout's status: the start hung.
    queue = harness.settings.task_queue
    async with relayed(harness.env.client.service_client.config.target_host) as relay:
        client = await Client.connect(relay.target, namespace=harness.env.client.namespace)
        relay.hang("DescribeTaskQueue")
        started = time.monotonic()
        with pytest.raises(TemporalUnanswered) as unanswered:
            async with asyncio.timeout(BOUND):
                await check_fleet_policy(client, queue, RulePolicy())
        assert time.monotonic() - started < BOUND - 5
    # Asked once: Temporal's silence is not a transient failure to ask again of.
    assert relay.held == ["DescribeTaskQueue"]
    assert unanswered.value.why.startswith(
        f"Temporal did not answer a describe of task queue {queue!r} within {SECONDS:g} s ("
    ), unanswered.value.why


@pytest.mark.timeout(150)
async def test_a_suspended_listing_says_temporal_did_not_answer_not_a_worker(
    harness: Harness,
) -> None:
    # A suspended Run, listed open, closed (terminated) as its state is asked: the query
    # is refused at once and the closed execution described. That describe not answered
    # was worded "no worker answered within 5 s", though it was Temporal that did not.
    workflow_id, _ = await _asking_run(harness, f"k-{uuid.uuid4().hex[:8]}")

    async def terminated() -> None:
        handle = harness.env.client.get_workflow_handle(workflow_id)
        await handle.terminate(reason="by a test")

    async with relayed_client(harness) as (relay, client):
        relay.before_next("QueryWorkflow", terminated)
        relay.hang(DESCRIBE)
        async with asyncio.timeout(BOUND):
            listed = await client.list(scope=harness.scope, suspended=True, limit=100)
    assert DESCRIBE in relay.held
    [summary] = [s for s in listed if s.workflow_id == workflow_id]
    assert summary.unreadable is not None
    assert summary.unreadable.startswith(
        f"Temporal did not answer a describe of Run {workflow_id} within {LIST_QUERY_SECONDS:g} s ("
    ), summary.unreadable
    assert "worker" not in summary.unreadable
