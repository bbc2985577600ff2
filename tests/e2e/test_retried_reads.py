"""A read the SDK sends again on a transient status (UNAVAILABLE...) is timed by its last
attempt, not by all of them: a CANCELLED Temporal answers at once after retries is its
answer (``TemporalCancelled``), not its silence. The SDK's core retried such reads out of
sight, so the time the call took, attempts and pauses, was read as the last attempt's
wait: six UNAVAILABLEs then a CANCELLED at once were called silence against a 2 s bound
after 3.3 s. A client connected with the psych plugin (``psych_runtime.workers.connect``)
makes those attempts itself (``AttemptTimed``). Temporal is the session's dev server
behind the gRPC relay, which answers the next calls of a method with the test's status."""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

import grpc
import pytest
from temporalio.client import Client
from temporalio.service import RetryConfig, RPCError, RPCStatusCode

from psych_runtime.activities.tools import RulePolicy
from psych_runtime.workers import PsychPlugin, connect
from psych_runtime.workers.fleet._policy import DESCRIBE_TRIES, check_fleet_policy
from psych_runtime.workflows import (
    AttemptFailed,
    TemporalCancelled,
    TemporalUnanswered,
    describe_within,
)

from ._grpc_relay import Relay, relayed
from ._short_reads import SHORT_READ
from .conftest import Harness
from .test_quick_cancels import _says_cancelled
from .test_reads_bounded import DESCRIBE

pytestmark = pytest.mark.e2e

WITHIN = timedelta(seconds=2)
"""The describe's bound: less than the pauses between the retries below."""
UNAVAILABLE_TIMES = 8
"""UNAVAILABLEs answered before the CANCELLED: the client's backoff between them (100 ms,
growing 1.5 times, within 20 %) pauses 3.9 s at least, past most of ``WITHIN``."""
BOUND = 60.0
HISTORY = "GetWorkflowExecutionHistory"
READ_ERRORS = (TemporalCancelled, TemporalUnanswered)
"""What a read of Temporal no worker answers ends in, silence or not."""


@asynccontextmanager
async def _psych_client(harness: Harness) -> AsyncIterator[tuple[Relay, Client]]:
    """A client connected as psych connects one (its plugin, its retries), through a relay."""
    async with relayed(harness.env.client.service_client.config.target_host) as relay:
        client = await connect(relay.target, namespace=harness.env.client.namespace, codec=None)
        yield relay, client


async def test_a_describe_cancelled_at_once_after_retries_is_not_called_silence(
    harness: Harness,
) -> None:
    async with _psych_client(harness) as (relay, client):
        relay.fail_next(DESCRIBE, grpc.StatusCode.UNAVAILABLE, times=UNAVAILABLE_TIMES)
        relay.fail_next(DESCRIBE, grpc.StatusCode.CANCELLED)
        handle = client.get_workflow_handle("psych-acme-r1")
        with pytest.raises(READ_ERRORS) as failed:
            async with asyncio.timeout(BOUND):
                await describe_within(handle, "psych-acme-r1", WITHIN)
    # Sent again after each UNAVAILABLE, as the SDK's core would, and no more.
    unavailable = [grpc.StatusCode.UNAVAILABLE] * UNAVAILABLE_TIMES
    assert relay.of(DESCRIBE) == [*unavailable, grpc.StatusCode.CANCELLED]
    err = _says_cancelled(
        failed.value, grpc.StatusCode.CANCELLED, "a describe", "Run psych-acme-r1"
    )
    cause = err.__cause__
    assert isinstance(cause, AttemptFailed) and cause.attempts == UNAVAILABLE_TIMES + 1
    copy = pickle.loads(pickle.dumps(cause))
    assert (type(copy), copy.status, copy.message, copy.attempts, copy.asked_at) == (
        AttemptFailed,
        cause.status,
        cause.message,
        cause.attempts,
        cause.asked_at,
    )


async def test_a_describe_not_answered_after_retries_is_still_silence(harness: Harness) -> None:
    async with _psych_client(harness) as (relay, client):
        relay.fail_next(DESCRIBE, grpc.StatusCode.UNAVAILABLE, times=3)
        relay.hang(DESCRIBE, after=3)
        handle = client.get_workflow_handle("psych-acme-r1")
        with pytest.raises(READ_ERRORS) as failed:
            async with asyncio.timeout(BOUND):
                await describe_within(handle, "psych-acme-r1", WITHIN)
    assert relay.of(DESCRIBE) == [grpc.StatusCode.UNAVAILABLE] * 3
    assert relay.held == [DESCRIBE]
    assert isinstance(failed.value, TemporalUnanswered), repr(failed.value)
    assert failed.value.why.startswith(
        "Temporal did not answer a describe of Run psych-acme-r1 within 2 s ("
    ), failed.value.why


@pytest.mark.usefixtures("short_reads")
@pytest.mark.timeout(120)
async def test_a_fleet_policy_try_cancelled_at_once_after_retries_is_asked_again(
    harness: Harness,
) -> None:
    # The worker's start's check sends DescribeTaskQueue with the client's retries and
    # asks again a try Temporal gave up at once; one whose retries took most of the
    # bound was taken for silence, and the worker's start ended "did not answer".
    queue = harness.settings.task_queue
    many = 9  # the pauses between them: 6 s at least, past most of SHORT_READ
    assert SHORT_READ.total_seconds() * 0.9 < 6
    async with _psych_client(harness) as (relay, client):
        relay.fail_next("DescribeTaskQueue", grpc.StatusCode.UNAVAILABLE, times=many)
        relay.fail_next("DescribeTaskQueue", grpc.StatusCode.CANCELLED, times=DESCRIBE_TRIES)
        with pytest.raises(READ_ERRORS) as failed:
            async with asyncio.timeout(BOUND):
                await check_fleet_policy(client, queue, RulePolicy())
    cancelled = [grpc.StatusCode.CANCELLED] * DESCRIBE_TRIES
    assert relay.of("DescribeTaskQueue") == [grpc.StatusCode.UNAVAILABLE] * many + cancelled
    _says_cancelled(failed.value, grpc.StatusCode.CANCELLED, "a describe", f"task queue {queue!r}")


async def test_a_client_connected_without_retries_retries_as_the_sdks_core_would(
    harness: Harness,
) -> None:
    # Connected with no retry_config, the core retries on its own defaults (pauses growing
    # 1.7 times: its 10 s ran out after 8 or 9 attempts, measured through this relay), not
    # the SDK's RetryConfig() (1.5 times, which AttemptTimed took: 10 attempts, its
    # max_retries, the pauses ~7.5 s in all). Counted by the relay for a describe
    # answered UNAVAILABLE each time, with the plugin and without it.
    target = harness.env.client.service_client.config.target_host
    attempts = {}
    for plugins in ([], [PsychPlugin()]):
        async with relayed(target) as relay:
            client = await Client.connect(
                relay.target, namespace=harness.env.client.namespace, plugins=plugins
            )
            relay.fail_next(DESCRIBE, grpc.StatusCode.UNAVAILABLE, times=30)
            with pytest.raises(RPCError) as failed:
                async with asyncio.timeout(BOUND):
                    await client.get_workflow_handle("psych-acme-r1").describe()
            assert failed.value.status == RPCStatusCode.UNAVAILABLE, repr(failed.value)
            attempts[bool(plugins)] = len(relay.of(DESCRIBE))
    # The core's max_retries (10) is never reached: its elapsed-time bound ends it first.
    assert attempts[False] < RetryConfig().max_retries, attempts
    assert attempts[True] < RetryConfig().max_retries, attempts


async def test_a_history_long_poll_asked_without_a_timeout_keeps_the_cores_deadline(
    harness: Harness,
) -> None:
    # The SDK's result() long-polls the close event with no timeout of its own: the core
    # gives such a poll 70 s (its long-poll deadline) on its retrying path only; sent with
    # its retries off it had the 30 s of any other call (measured: 70.0 s against 30.0 s
    # left as the relay took it). The relay records each call's deadline as it comes.
    target = harness.env.client.service_client.config.target_host
    namespace = harness.env.client.namespace
    left = {}
    for psych in (False, True):
        async with relayed(target) as relay:
            if psych:
                client = await connect(relay.target, namespace=namespace, codec=None)
            else:
                client = await Client.connect(relay.target, namespace=namespace)
            with pytest.raises(RPCError) as failed:
                async with asyncio.timeout(BOUND):
                    await client.get_workflow_handle("psych-acme-no-such-run").result()
            assert failed.value.status == RPCStatusCode.NOT_FOUND, repr(failed.value)
        (left[psych],) = [seconds for name, seconds in relay.deadlines if name == HISTORY]
    assert all(seconds is not None and 60 < seconds <= 70 for seconds in left.values()), left


@pytest.mark.parametrize(
    ("message", "sent"), [("operation was canceled", 2), ("context canceled", 1)]
)
async def test_a_read_whose_connection_dropped_is_sent_again_once(
    harness: Harness, message: str, sent: int
) -> None:
    # A CANCELLED the SDK's HTTP client makes of a request its connection dropped (hyper's
    # "operation was canceled") was retried once by the core, unseen; made here, it read as
    # Temporal giving a result()'s long poll up (a whole-suite run, 12-07 18:53). A
    # CANCELLED the server answered is its answer.
    async with _psych_client(harness) as (relay, client):
        relay.fail_next(DESCRIBE, grpc.StatusCode.CANCELLED, message=message)
        relay.fail_next(DESCRIBE, grpc.StatusCode.NOT_FOUND)
        handle = client.get_workflow_handle("psych-acme-r1")
        with pytest.raises(RPCError) as failed:
            async with asyncio.timeout(BOUND):
                await handle.describe(rpc_timeout=WITHIN)
    statuses = [grpc.StatusCode.CANCELLED, grpc.StatusCode.NOT_FOUND][:sent]
    assert relay.of(DESCRIBE) == statuses
    assert failed.value.status == (
        RPCStatusCode.NOT_FOUND if sent == 2 else RPCStatusCode.CANCELLED
    )
