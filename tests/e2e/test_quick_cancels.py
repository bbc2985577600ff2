"""A timeout's status Temporal answers at once (CANCELLED under load, or DEADLINE_EXCEEDED)
is its answer, not its silence, at every read that needs no worker: the describe of a
closed Run (``_closed.py``, ``_unsettled.py``), a Run listing's requests (``_visibility``)
and the history long polls (a follower's watch, an A2A stream's close watch,
``PsychClient.result``) raise ``TemporalCancelled`` saying Temporal cancelled the read at
once, REST's 503 ``temporal``, not "Temporal did not answer ... within N s". Each read's
time is of its one request: ``result()``'s SDK asks again, unseen, after each empty
answer of its long poll, so the time of the whole call is not. Temporal is the session's
dev server behind the gRPC relay, which answers the next call of a method with the
status on cue."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import grpc
import pytest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from psych_runtime.specs import Refused, Scope
from psych_runtime.workers.cli._main import _temporal_refusal, main
from psych_runtime.workers.serve._problems import problem_of
from psych_runtime.workers.serve.a2a._closing import until_closed
from psych_runtime.workflows import HISTORY_LONG_POLL_TIMEOUT, RefusalKind, TemporalCancelled
from psych_runtime.workflows.client._follow import RecordFollower
from psych_runtime.workflows.client._unsettled import closed_state, closed_without_settling
from psych_runtime.workflows.contract._contract import SA_TENANT

from ._continuing_run import ContinuesWhenTold
from ._short_reads import SHORT_READ
from .test_listing_bounded import COUNT, FIRST, LIST, relayed_client
from .test_reads_bounded import DESCRIBE, HISTORY

pytestmark = pytest.mark.e2e

STATUSES = pytest.mark.parametrize(
    "status", [grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED]
)
AT_ONCE = SHORT_READ.total_seconds()
"""How long a read Temporal gives up at once may take here: less than the bound it would
have waited (the reads' ``SHORT_READ``; the long polls' 30 s), on a busy machine too."""


async def _run(client: Client, tenant: str, *, close: bool) -> str:
    """A Run of ``tenant`` no worker takes, terminated when ``close``; its workflow id."""
    workflow_id = f"psych-{tenant}-{uuid.uuid4().hex}"
    handle = await client.start_workflow(
        "AgentRun",
        id=workflow_id,
        task_queue=f"nobody-{uuid.uuid4().hex[:8]}",
        search_attributes=TypedSearchAttributes(
            [SearchAttributePair(SearchAttributeKey.for_keyword(SA_TENANT), tenant)]
        ),
    )
    if close:
        await handle.terminate("closed for the test")
    return workflow_id


def _says_cancelled(
    err: BaseException, status: grpc.StatusCode, what: str, subject: str
) -> TemporalCancelled:
    assert isinstance(err, TemporalCancelled), repr(err)
    assert err.status.name == status.name
    assert err.why.startswith(f"Temporal cancelled {what} of {subject} at once ({status.name}: "), (
        err.why
    )
    assert err.why.endswith("rather than not answering; send the request again"), err.why
    problem = problem_of(err)
    assert problem is not None
    assert (problem.status, problem.kind, problem.detail) == (503, "temporal", err.why)
    assert _temporal_refusal(err) == f"psych: {err.why}"
    return err


async def _raised(read: Awaitable[object]) -> BaseException:
    """What awaiting ``read`` raised, within ``AT_ONCE`` seconds."""
    started = time.monotonic()
    with pytest.raises(Exception) as failed:  # noqa: PT011  # each caller checks what
        async with asyncio.timeout(AT_ONCE + 10):
            await read
    assert time.monotonic() - started < AT_ONCE, failed.value
    return failed.value


@STATUSES
@pytest.mark.timeout(90)
@pytest.mark.usefixtures("short_reads")
async def test_a_closed_runs_describe_cancelled_at_once_says_so(
    dev_env: WorkflowEnvironment, tmp_path: Path, status: grpc.StatusCode
) -> None:
    scope = Scope(tenant=f"t{uuid.uuid4().hex[:10]}")
    workflow_id = await _run(dev_env.client, scope.tenant, close=True)
    subject = f"Run {workflow_id}"
    async with relayed_client(dev_env, tmp_path) as (relay, client):
        relay.fail_next(DESCRIBE, status)
        err = await _raised(client.closed(workflow_id, scope=scope))
        _says_cancelled(err, status, "a describe", subject)

        relay.fail_next(DESCRIBE, status)
        err = await _raised(closed_without_settling(client.temporal, workflow_id))
        _says_cancelled(err, status, "a describe", subject)

        relay.fail_next(DESCRIBE, status)
        err = await _raised(closed_state(client.temporal, workflow_id, SHORT_READ))
        _says_cancelled(err, status, "a describe", subject)
    assert relay.of(DESCRIBE) == [status] * 3


@STATUSES
@pytest.mark.timeout(90)
@pytest.mark.usefixtures("short_reads")
async def test_a_listings_request_cancelled_at_once_says_so(
    dev_env: WorkflowEnvironment, tmp_path: Path, status: grpc.StatusCode
) -> None:
    scope = Scope(tenant=f"t{uuid.uuid4().hex[:10]}")
    listing = f"tenant {scope.tenant!r}'s Run listing"
    async with relayed_client(dev_env, tmp_path) as (relay, client):
        relay.fail_next(LIST, status)
        err = await _raised(client.list_page(scope=scope, limit=1))
        cancelled = _says_cancelled(err, status, FIRST, listing)
        assert cancelled.workflow_id is None

        relay.fail_next(COUNT, status)
        err = await _raised(client.count(scope=scope))
        _says_cancelled(err, status, "the count", listing)
    assert relay.of(LIST) == [status]
    assert relay.of(COUNT) == [status]


@STATUSES
@pytest.mark.timeout(90)
async def test_a_history_long_poll_cancelled_at_once_says_so(
    dev_env: WorkflowEnvironment, tmp_path: Path, status: grpc.StatusCode
) -> None:
    scope = Scope(tenant=f"t{uuid.uuid4().hex[:10]}")
    workflow_id = await _run(dev_env.client, scope.tenant, close=False)
    subject = f"Run {workflow_id}"
    try:
        async with relayed_client(dev_env, tmp_path) as (relay, client):
            # A follower's watch of the history (its first long poll).
            relay.fail_next(HISTORY, status)
            follower = RecordFollower(client.temporal, workflow_id)

            async def follow() -> None:
                async for _ in follower.records():
                    pass

            err = await _raised(follow())
            cancelled = _says_cancelled(err, status, "a page of the history", subject)
            assert f"({status.name}: after 0 events read: " in cancelled.why

            # An A2A stream's close watch.
            async def never() -> AsyncIterator[str]:
                await asyncio.Event().wait()
                yield "never"

            async def watch() -> None:
                async for _ in until_closed(never(), client.temporal, workflow_id, grace=1.0):
                    pass

            relay.fail_next(HISTORY, status)
            err = await _raised(watch())
            _says_cancelled(err, status, "a long poll of the close event", subject)

            # ``PsychClient.result``.
            relay.fail_next(HISTORY, status)
            err = await _raised(client.result(workflow_id, scope=scope))
            _says_cancelled(err, status, "a long poll of the close event", subject)
        assert relay.of(HISTORY) == [status] * 3
    finally:
        await dev_env.client.get_workflow_handle(workflow_id).terminate()


@pytest.mark.timeout(150)
async def test_results_long_poll_cancelled_after_empty_answers_is_timed_on_its_own(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """The relay does not pass the caller's deadline on, so Temporal answers each long
    poll of an open Run's close event empty at its own interval (20 s); ``result()``'s SDK
    asks again each time, unseen. A CANCELLED answered at once after two such answers came
    ~40 s after ``result()`` was called, more than its bound (30 s): timed as a whole, it
    would be taken for Temporal's silence."""
    assert HISTORY_LONG_POLL_TIMEOUT.total_seconds() < 38
    scope = Scope(tenant=f"t{uuid.uuid4().hex[:10]}")
    workflow_id = await _run(dev_env.client, scope.tenant, close=False)
    try:
        async with relayed_client(dev_env, tmp_path) as (relay, client):
            # Passed on three times (the first answered at once: the history so far holds
            # no close event), then the fourth answered CANCELLED by the relay.
            def after(passed: int) -> Callable[[], Awaitable[None]]:
                async def action() -> None:
                    if passed == 0:
                        relay.fail_next(HISTORY, grpc.StatusCode.CANCELLED)
                    else:
                        relay.before_next(HISTORY, after(passed - 1))

                return action

            relay.before_next(HISTORY, after(3))
            started = time.monotonic()
            with pytest.raises(TemporalCancelled) as failed:
                async with asyncio.timeout(120):
                    await client.result(workflow_id, scope=scope)
            assert time.monotonic() - started > HISTORY_LONG_POLL_TIMEOUT.total_seconds()
        assert relay.of(HISTORY) == [grpc.StatusCode.OK] * 3 + [grpc.StatusCode.CANCELLED]
        _says_cancelled(
            failed.value,
            grpc.StatusCode.CANCELLED,
            "a long poll of the close event",
            f"Run {workflow_id}",
        )
    finally:
        await dev_env.client.get_workflow_handle(workflow_id).terminate()


@pytest.mark.timeout(150)
async def test_results_long_poll_after_a_continue_as_new_is_timed_on_its_own(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """A Run that continues as new while ``result()`` waits: the next execution's close
    event is waited for as the first one's was, each long poll timed on its own. Read by
    the SDK's ``result()`` instead, which asks again unseen after each empty answer (20 s),
    a CANCELLED answered at once ~40 s after the continue-as-new was taken for Temporal's
    silence ("did not answer ... within 30 s")."""
    assert HISTORY_LONG_POLL_TIMEOUT.total_seconds() < 38
    scope = Scope(tenant=f"t{uuid.uuid4().hex[:10]}")
    workflow_id = f"psych-{scope.tenant}-{uuid.uuid4().hex}"
    queue = f"continuing-{uuid.uuid4().hex[:8]}"
    async with Worker(
        dev_env.client,
        task_queue=queue,
        workflows=[ContinuesWhenTold],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        first = await dev_env.client.start_workflow(
            ContinuesWhenTold.run, 1, id=workflow_id, task_queue=queue
        )
        try:
            async with relayed_client(dev_env, tmp_path) as (relay, client):
                told_at: list[float] = []

                # Every long poll passed on until ~35 s after the continue-as-new; the
                # next one (of the new execution, Temporal's empty answers at 20 s
                # between) answered CANCELLED by the relay.
                async def each() -> None:
                    if told_at and time.monotonic() - told_at[0] > 35:
                        relay.fail_next(HISTORY, grpc.StatusCode.CANCELLED)
                    else:
                        relay.before_next(HISTORY, each)

                relay.before_next(HISTORY, each)
                waiting = asyncio.create_task(client.result(workflow_id, scope=scope))
                await asyncio.sleep(2)  # its first long poll asked, of the first execution
                await first.signal(ContinuesWhenTold.told)
                told_at.append(time.monotonic())
                with pytest.raises(TemporalCancelled) as failed:
                    async with asyncio.timeout(120):
                        await waiting
            assert relay.of(HISTORY)[-1] == grpc.StatusCode.CANCELLED
            execution = dev_env.client.get_workflow_handle(workflow_id, run_id=first.result_run_id)
            assert (await execution.describe()).status is WorkflowExecutionStatus.CONTINUED_AS_NEW
            _says_cancelled(
                failed.value,
                grpc.StatusCode.CANCELLED,
                "a long poll of the close event",
                f"Run {workflow_id}",
            )
        finally:
            await dev_env.client.get_workflow_handle(workflow_id).terminate()


@pytest.mark.timeout(90)
@pytest.mark.usefixtures("short_reads")
async def test_an_update_of_a_settled_run_whose_describe_is_cancelled_says_so(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    # Temporal refuses the update of a closed Run NOT_FOUND; how it settled is then read
    # (its state query rejected at once, its describe): a describe Temporal cancelled was
    # said "no worker answered how within 10 s".
    scope = Scope(tenant=f"t{uuid.uuid4().hex[:10]}")
    workflow_id = await _run(dev_env.client, scope.tenant, close=True)
    async with relayed_client(dev_env, tmp_path) as (relay, client):
        relay.fail_next(DESCRIBE, grpc.StatusCode.CANCELLED)
        err = await _raised(client.steer(workflow_id, "hi", scope=scope))
    assert relay.of(DESCRIBE) == [grpc.StatusCode.CANCELLED]
    assert isinstance(err, Refused) and err.kind == RefusalKind.NOT_SUSPENDED, repr(err)
    assert str(err) == (
        f"{workflow_id} has settled (how could not be read: Temporal cancelled a describe "
        f"of Run {workflow_id} at once (CANCELLED: the relay answers CANCELLED (scripted)): "
        "it gave the read up (under load, say) rather than not answering; send the request "
        "again)"
    )


@pytest.mark.timeout(90)
async def test_psych_status_says_a_describe_temporal_cancelled_not_that_no_worker_answered(
    dev_env: WorkflowEnvironment, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A closed execution's status is its describe once the query is refused (a worker
    # polls its queue): a CANCELLED Temporal answered that describe with at once was taken
    # by `psych status` for a query no worker answered ("no worker of task queue ...
    # answered within 5 s"), and the facts printed, exit 0.
    scope = Scope(tenant=f"t{uuid.uuid4().hex[:10]}")
    workflow_id = await _run(dev_env.client, scope.tenant, close=True)
    queue = (await dev_env.client.get_workflow_handle(workflow_id).describe()).task_queue
    async with (
        Worker(
            dev_env.client,
            task_queue=queue,
            workflows=[ContinuesWhenTold],
            workflow_runner=UnsandboxedWorkflowRunner(),
        ),
        relayed_client(dev_env, tmp_path) as (relay, _),
    ):

        async def then_cancel_the_describe() -> None:
            relay.fail_next(DESCRIBE, grpc.StatusCode.CANCELLED)

        # The Run's describes (its queues', its facts') pass; the one after the query is
        # cancelled at once.
        relay.before_next("QueryWorkflow", then_cancel_the_describe)
        argv = ["status", workflow_id, "--address", relay.target, "--tenant", scope.tenant]
        async with asyncio.timeout(AT_ONCE + 20):
            exit_status = await asyncio.to_thread(
                main, [*argv, "--namespace", dev_env.client.namespace]
            )
    assert relay.of("QueryWorkflow") == [grpc.StatusCode.OK]
    assert relay.of(DESCRIBE)[-1] == grpc.StatusCode.CANCELLED
    assert exit_status == 1
    said = capsys.readouterr()
    assert said.out == ""
    assert said.err == (
        f"psych: Temporal cancelled a describe of Run {workflow_id} at once (CANCELLED: the "
        "relay answers CANCELLED (scripted)): it gave the read up (under load, say) rather "
        "than not answering; send the request again\n"
    ), said.err
