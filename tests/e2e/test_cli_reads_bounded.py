"""``psych status`` against a Temporal that accepts its calls and does not answer some:
it ends within ``TEMPORAL_READ_TIMEOUT`` saying so, and never says a worker did not answer
when Temporal did not (a review of the bounded reads, 12-07). The command's coroutine in
this process, through the gRPC relay in front of the session dev server."""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid

import pytest

from psych_runtime.specs import AgentBuilder
from psych_runtime.workers.cli._main import _temporal_refusal
from psych_runtime.workers.cli._resume import _warn_without_worker
from psych_runtime.workers.cli._runs import _status
from psych_runtime.workers.fleet import unpolled_queues
from psych_runtime.workflows import PsychClient, TemporalUnanswered

from ._grpc_relay import Relay
from ._short_reads import SHORT_READ
from .conftest import Harness
from .test_reads_bounded import BOUND, DESCRIBE, _asking_run, _settled_run, relayed_client

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("short_reads")]

SECONDS = SHORT_READ.total_seconds()

DESCRIBE_QUEUE = "DescribeTaskQueue"


def _status_args(relay: Relay, harness: Harness, workflow_id: str) -> argparse.Namespace:
    """``psych status RUN --address RELAY --tenant acme``'s arguments."""
    return argparse.Namespace(
        run_id=workflow_id,
        address=relay.target,
        namespace=harness.env.client.namespace,
        tenant=harness.scope.tenant,
        json=False,
    )


@pytest.mark.timeout(120)
async def test_psych_status_whose_describes_are_not_answered_ends_saying_so(
    harness: Harness,
) -> None:
    # Its first read, which queues of the Run no worker polls, described the Run with no
    # timeout: the command hung (``run_facts``'s describe, after it, was bounded).
    workflow_id, _ = await _settled_run(harness)
    async with relayed_client(harness) as (relay, _client):
        relay.hang(DESCRIBE)
        started = time.monotonic()
        with pytest.raises(TemporalUnanswered) as unanswered:
            async with asyncio.timeout(BOUND):
                await _status(_status_args(relay, harness, workflow_id))
        assert time.monotonic() - started < BOUND - 5
    assert relay.held[:1] == [DESCRIBE]
    assert unanswered.value.why.startswith(
        f"Temporal did not answer a describe of Run {workflow_id} within {SECONDS:g} s ("
    )
    # The command's one line says it as it is: Temporal did not answer (it refused nothing).
    assert _temporal_refusal(unanswered.value) == f"psych: {unanswered.value.why}"


@pytest.mark.timeout(150)
async def test_psych_status_does_not_call_temporals_silence_a_workers(
    harness: Harness, capsys: pytest.CaptureFixture[str]
) -> None:
    # A Run Temporal closed unsettled (terminated), a worker polling its queue: its state
    # query is refused at once and its closed execution described. That describe not
    # answered was printed as "no worker ... answered within 3 s" and the command's
    # fallback, though the worker polls and it was Temporal that did not answer.
    workflow_id, _ = await _asking_run(harness, f"k-{uuid.uuid4().hex[:8]}")
    await harness.env.client.get_workflow_handle(workflow_id).terminate(reason="by a test")
    async with relayed_client(harness) as (relay, _client):
        # Past the describes of the unpolled queues' check and of ``run_facts``.
        relay.hang(DESCRIBE, after=2)
        with pytest.raises(TemporalUnanswered) as unanswered:
            async with asyncio.timeout(BOUND):
                await _status(_status_args(relay, harness, workflow_id))
    assert relay.held == [DESCRIBE]
    assert unanswered.value.why.startswith(
        f"Temporal did not answer a describe of Run {workflow_id} within 3 s ("
    )
    assert "cannot answer" not in capsys.readouterr().err


@pytest.mark.timeout(120)
async def test_psych_status_and_resumes_task_queue_describes_are_bounded(
    harness: Harness,
) -> None:
    # Whether a worker polls the Run's queue (DescribeTaskQueue) was asked with no
    # timeout: with its describes answered and that one not, the command still hung. A
    # Run waiting on its caller (a resume asks only of an open one).
    workflow_id, _ = await _asking_run(harness, f"k-{uuid.uuid4().hex[:8]}")
    async with relayed_client(harness) as (relay, client):
        relay.hang(DESCRIBE_QUEUE)
        started = time.monotonic()
        with pytest.raises(TemporalUnanswered) as unanswered:
            async with asyncio.timeout(BOUND):
                await _status(_status_args(relay, harness, workflow_id))
        assert time.monotonic() - started < BOUND - 5
        assert unanswered.value.why.startswith(
            f"Temporal did not answer a describe of task queue "
            f"{harness.settings.task_queue!r} within {SECONDS:g} s ("
        ), unanswered.value.why
        # Before a resume: nothing said of the worker when Temporal does not answer.
        started = time.monotonic()
        async with asyncio.timeout(BOUND):
            await _warn_without_worker(client.temporal, workflow_id)
        assert time.monotonic() - started < BOUND - 5
    assert relay.held == [DESCRIBE_QUEUE, DESCRIBE_QUEUE]


@pytest.mark.timeout(120)
async def test_the_check_of_a_runs_unpolled_queues_is_bounded(harness: Harness) -> None:
    # A Run whose workflow task waits on a queue: ``psych status`` asks whether a worker
    # polls it (DescribeTaskQueue), which had no timeout.
    queue = f"nobody-{uuid.uuid4().hex[:12]}"
    spec = AgentBuilder(f"bounded{uuid.uuid4().hex[:8]}").model("fake-model").build()
    async with relayed_client(harness) as (relay, client):
        unpolled = PsychClient(client.temporal, store=client.store, task_queue=queue)
        run = await unpolled.dispatch(spec, "go", scope=harness.scope)
        relay.hang(DESCRIBE_QUEUE)
        started = time.monotonic()
        with pytest.raises(TemporalUnanswered) as unanswered:
            async with asyncio.timeout(BOUND):
                await unpolled_queues(client.temporal, run.workflow_id)
        assert time.monotonic() - started < BOUND - 5
    assert relay.held == [DESCRIBE_QUEUE]
    assert unanswered.value.why.startswith(
        f"Temporal did not answer a describe of task queue {queue!r} within {SECONDS:g} s ("
    ), unanswered.value.why
