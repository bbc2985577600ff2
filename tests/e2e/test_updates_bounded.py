"""An update of a Run (answer, approve, abort, steer...; ``taken``'s wait for a keyed
request's outcome) waits its ``update_timeout`` for the Run's worker at most, then says so
(``UpdateUnanswered``: it may still be applied, and how to learn its outcome), as REST's
503 ``no-worker`` and the CLI's one line. With no worker polling the Run's queue, or a
Temporal that accepts the call and never answers it (the gRPC relay holding it), each
waited for ever before. The session dev server; each test bounded, as each wait was not."""

from __future__ import annotations

import argparse
import asyncio
import pickle
import time
import uuid
from collections.abc import Awaitable
from datetime import timedelta

import grpc
import pytest
from temporalio.api.common.v1 import GrpcStatus
from temporalio.api.errordetails.v1 import WorkflowNotReadyFailure
from temporalio.client import WorkflowUpdateRPCTimeoutOrCancelledError

from psych_runtime.activities.mcp._consent_callback import Waiting, index_key
from psych_runtime.specs import Refused
from psych_runtime.testing import Reply
from psych_runtime.workers._bounded import NotTakenInTime, bounded
from psych_runtime.workers._oauth_callback import complete_authorization
from psych_runtime.workers.cli._main import _temporal_refusal, main
from psych_runtime.workers.cli._resume import _resume
from psych_runtime.workers.serve._problems import problem_of
from psych_runtime.workers.serve.a2a import MemoryTokenStore
from psych_runtime.workflows import (
    UPDATE_TIMEOUT,
    RefusalKind,
    RunStatus,
    UpdateEndedByTemporal,
    UpdateUnanswered,
)
from psych_runtime.workflows.client import _update_wait
from psych_runtime.workflows.client._client_actions import NOT_READY_DELAYS
from psych_runtime.workflows.client._update_wait import HELD_READ_TIMEOUT

from .conftest import Harness
from .test_reads_bounded import _asking_run, _settled_run, relayed_client

pytestmark = pytest.mark.e2e

SHORT = timedelta(seconds=2)
BOUND = 20.0
"""How long a test waits for an update that should end within ``SHORT``."""


async def _unanswered(call: Awaitable[object]) -> UpdateUnanswered:
    """The ``UpdateUnanswered`` ``call`` ends in, within ``BOUND``, having
    waited ``SHORT`` at least."""
    started = time.monotonic()
    with pytest.raises(UpdateUnanswered) as raised:
        async with asyncio.timeout(BOUND):
            await call
    waited = time.monotonic() - started
    assert SHORT.total_seconds() * 0.9 <= waited < SHORT.total_seconds() + 5, waited
    return raised.value


@pytest.mark.timeout(120)
async def test_an_answer_no_worker_takes_ends_saying_so_and_is_applied_later(
    harness: Harness,
) -> None:
    workflow_id, _ = await _asking_run(harness, f"k-{uuid.uuid4().hex[:8]}")
    # No worker polls the Run's queue now: the answer is held until one does.
    key = f"a-{uuid.uuid4().hex[:8]}"
    err = await _unanswered(
        harness.client.answer(
            workflow_id,
            "q1",
            "Monday",
            scope=harness.scope,
            idempotency_key=key,
            update_timeout=SHORT,
        )
    )
    # Temporal, asked once the bound ran out, holds the update (admitted): no worker took
    # it. It was said "none polls the Run's task queue, or Temporal did not answer".
    assert err.held == "admitted"
    assert err.why == (
        f"Run {workflow_id}: no worker took the update psych.resume within 2 s (Temporal "
        "holds it: none polls the Run's task queue, or its worker is busy); it may still be "
        f"applied when a worker takes it: send it again under the same idempotency key "
        f"({key!r}), or ask `taken` with it, to learn its outcome: it is applied at most once"
    )
    assert str(err) == err.why
    assert _temporal_refusal(err) == f"psych: {err.why}"
    problem = problem_of(err)
    assert problem is not None and (problem.status, problem.kind) == (503, "no-worker")
    copy = pickle.loads(pickle.dumps(err))
    assert (type(copy), copy.why, copy.timeout, copy.held) == (
        UpdateUnanswered,
        err.why,
        SHORT,
        "admitted",
    )
    # The outcome's wait is bounded the same.
    taken = await _unanswered(
        harness.client.taken(workflow_id, key, scope=harness.scope, update_timeout=SHORT)
    )
    assert taken.why.startswith(
        f"Run {workflow_id}: no worker took and answered the outcome of the request within 2 s"
    )
    # Without a key: say to read the Run before sending it again.
    aborted = await _unanswered(
        harness.client.abort(workflow_id, scope=harness.scope, update_timeout=SHORT)
    )
    assert aborted.why.endswith(
        "read the Run's state before sending it again (sent under an idempotency key, it "
        "could be sent again safely)"
    )
    harness.fake.enqueue(Reply.text("Monday it is"))
    async with harness.worker():
        # The answer was sent: a worker takes it (and the abort after it).
        result = await harness.client.taken(workflow_id, key, scope=harness.scope)
        assert result is not None and (result.id, result.outcome) == ("q1", "answered")
        final = await harness.client.result(workflow_id, scope=harness.scope)
        assert final.status is RunStatus.ABORTED, final


@pytest.mark.timeout(120)
async def test_an_update_temporal_does_not_answer_ends_saying_so(harness: Harness) -> None:
    workflow_id, _ = await _asking_run(harness, f"k-{uuid.uuid4().hex[:8]}")
    async with harness.worker(), relayed_client(harness) as (relay, client):
        relay.hang("UpdateWorkflowExecution")
        err = await _unanswered(
            client.steer(workflow_id, "hurry", scope=harness.scope, update_timeout=SHORT)
        )
        assert relay.held == ["UpdateWorkflowExecution"]
        # Asked after, Temporal holds no such update: its silence, not a worker's (one
        # polls the Run's queue here). It was said "no worker took and answered".
        assert err.held == "unknown"
        assert err.why == (
            f"Run {workflow_id}: Temporal did not answer the update psych.steer within 2 s, "
            "and, asked after, holds no such update (it most likely never received it; no "
            "worker is waited for): read the Run's state before sending it again (sent under "
            "an idempotency key, it could be sent again safely)"
        )
        # Not answered that either (HELD_READ_TIMEOUT more): said as before, both named.
        relay.hang("PollWorkflowExecutionUpdate")
        started = time.monotonic()
        with pytest.raises(UpdateUnanswered) as unsaid:
            async with asyncio.timeout(BOUND):
                await client.steer(workflow_id, "hurry", scope=harness.scope, update_timeout=SHORT)
        waited = time.monotonic() - started
        limit = (SHORT + HELD_READ_TIMEOUT).total_seconds()
        assert limit * 0.9 <= waited < limit + 5, waited
        assert relay.held[-1] == "PollWorkflowExecutionUpdate"
        assert unsaid.value.held is None
        assert unsaid.value.why.startswith(
            f"Run {workflow_id}: no worker took and answered the update psych.steer within 2 s "
            "(none polls the Run's task queue, or Temporal did not answer); "
        )
        # The serve's bound gives the client its own: whichever runs out first, its 503.
        with pytest.raises(NotTakenInTime):
            await bounded(
                client.steer(workflow_id, "hurry", scope=harness.scope, update_timeout=SHORT),
                SHORT.total_seconds() + 3,
            )


@pytest.mark.timeout(120)
async def test_an_update_answered_whose_answer_never_came_back_says_so(
    harness: Harness,
) -> None:
    workflow_id, _ = await _asking_run(harness, f"k-{uuid.uuid4().hex[:8]}")
    harness.fake.enqueue(Reply.text("Monday it is"))
    key = f"a-{uuid.uuid4().hex[:8]}"
    async with harness.worker(), relayed_client(harness) as (relay, client):
        # The server has the update and the Run's worker answers it; its answer never
        # comes back to the client.
        relay.withhold("UpdateWorkflowExecution")
        err = await _unanswered(
            client.answer(
                workflow_id,
                "q1",
                "Monday",
                scope=harness.scope,
                idempotency_key=key,
                update_timeout=SHORT,
            )
        )
        assert relay.held == ["UpdateWorkflowExecution"]
        # It was said "the Run's worker took it but had not answered it; it may still be
        # applied": it had answered (and the answer was applied).
        assert err.held == "completed"
        assert err.why == (
            f"Run {workflow_id}: the Run's worker answered the update psych.resume, but its "
            "answer did not come back within 2 s (Temporal, asked after, has it answered): "
            f"send it again under the same idempotency key ({key!r}), or ask `taken` with "
            "it, to learn its outcome: it is applied at most once"
        )
        result = await harness.client.taken(workflow_id, key, scope=harness.scope)
        assert result is not None and (result.id, result.outcome) == ("q1", "answered")


@pytest.mark.timeout(120)
async def test_an_update_not_ready_until_its_bound_ran_out_says_so(harness: Harness) -> None:
    workflow_id, _ = await _asking_run(harness, f"k-{uuid.uuid4().hex[:8]}")
    # Temporal refuses every attempt as not ready (the workflow task carrying it failed):
    # the bound runs out in the pause before the next attempt.
    not_ready = GrpcStatus(code=grpc.StatusCode.FAILED_PRECONDITION.value[0], message="not ready")
    not_ready.details.add().Pack(WorkflowNotReadyFailure())
    key = f"a-{uuid.uuid4().hex[:8]}"
    async with harness.worker(), relayed_client(harness) as (relay, client):
        relay.fail_next(
            "UpdateWorkflowExecution",
            grpc.StatusCode.FAILED_PRECONDITION,
            times=len(NOT_READY_DELAYS) + 1,
            details=not_ready.SerializeToString(),
        )
        err = await _unanswered(
            client.answer(
                workflow_id,
                "q1",
                "Monday",
                scope=harness.scope,
                idempotency_key=key,
                update_timeout=SHORT,
            )
        )
        assert relay.of("UpdateWorkflowExecution") == [grpc.StatusCode.FAILED_PRECONDITION] * 5
        # It was said "Temporal did not answer ..., and, asked after, holds no such update
        # (it most likely never received it)": it answered each attempt, not ready.
        assert "PollWorkflowExecutionUpdate" not in {name for name, _ in relay.answered}
        assert err.held == "not-ready"
        assert err.why == (
            f"Run {workflow_id}: Temporal refused the update psych.resume as not ready (the "
            "Run's workflow task that carried it failed, so it was not applied) and 2 s ran "
            "out before it was sent again: send it again under the same idempotency key "
            f"({key!r}), or ask `taken` with it, to learn its outcome: it is applied at most "
            "once"
        )


@pytest.mark.timeout(120)
async def test_psych_answer_with_no_worker_ends_in_one_line(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The CLI gives no timeout: the client's default, ``UPDATE_TIMEOUT`` (shortened here).
    assert timedelta(seconds=10) == UPDATE_TIMEOUT
    monkeypatch.setattr(_update_wait, "UPDATE_TIMEOUT", SHORT)
    workflow_id, _ = await _asking_run(harness, f"k-{uuid.uuid4().hex[:8]}")
    args = argparse.Namespace(
        command="answer",
        run_id=workflow_id,
        call_id="q1",
        text="Monday",
        address=harness.env.client.service_client.config.target_host,
        namespace=harness.env.client.namespace,
        tenant=harness.scope.tenant,
        principal="ops",
        idempotency_key=None,
        held_by=None,
        update_timeout=None,
    )
    err = await _unanswered(_resume(args))
    line = _temporal_refusal(err)
    assert line is not None and "\n" not in line
    assert line.startswith(
        f"psych: Run {workflow_id}: no worker took the update psych.resume within 2 s (Temporal "
        "holds it: "
    ), line


@pytest.mark.timeout(120)
async def test_psych_steer_waits_its_update_timeout(
    harness: Harness, capsys: pytest.CaptureFixture[str]
) -> None:
    # The CLI had no way to set the bound: every update command waited the client's 10 s.
    workflow_id, _ = await _asking_run(harness, f"k-{uuid.uuid4().hex[:8]}")
    argv = [
        *("steer", workflow_id, "hurry", "--tenant", harness.scope.tenant),
        *("--address", harness.env.client.service_client.config.target_host),
        *("--namespace", harness.env.client.namespace, "--update-timeout", "2"),
    ]
    started = time.monotonic()
    async with asyncio.timeout(BOUND):
        exit_status = await asyncio.to_thread(main, argv)
    waited = time.monotonic() - started
    assert exit_status == 1
    assert SHORT.total_seconds() * 0.9 <= waited < SHORT.total_seconds() + 5, waited
    *_, line = capsys.readouterr().err.splitlines()
    assert line.startswith(
        f"psych: Run {workflow_id}: no worker took the update psych.steer within 2 s (Temporal "
        "holds it: "
    ), line


@pytest.mark.parametrize("seconds", ["0", "-1", "nan", "inf", "1e-9", "1e12", "soon"])
@pytest.mark.parametrize("command", ["approve", "deny", "answer", "complete", "abort", "steer"])
def test_psych_update_timeout_not_a_time_to_wait_is_refused_naming_it(
    command: str, seconds: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Refused before anything is connected to (127.0.0.1:9 answers nothing).
    given = {"approve": ["c1"], "deny": ["c1"], "answer": ["q1", "Monday"], "complete": ["t1"]}
    argv = [command, "psych-acme-x", *given.get(command, ["hi"] if command == "steer" else [])]
    with pytest.raises(SystemExit) as ended:
        main([*argv, "--address", "127.0.0.1:9", "--update-timeout", seconds])
    assert ended.value.code == 2
    *_, line = capsys.readouterr().err.splitlines()
    assert line.endswith(
        f"error: argument --update-timeout: {seconds!r} is not a time to wait (a number of "
        "seconds, at least 0.000001 and at most 1e+09)"
    ), line


@pytest.mark.parametrize("seconds", [0, -1])
async def test_an_update_timeout_not_positive_is_refused_naming_it(
    harness: Harness, seconds: int
) -> None:
    given = timedelta(seconds=seconds)
    with pytest.raises(ValueError, match=r"^update_timeout: a positive time to wait"):
        await harness.client.steer("psych-acme-x", "hi", scope=harness.scope, update_timeout=given)
    with pytest.raises(ValueError, match=r"^update_timeout: a positive time to wait"):
        await harness.client.taken("psych-acme-x", "k", scope=harness.scope, update_timeout=given)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("status", [grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED])
async def test_an_update_temporal_ends_with_a_timeouts_status_is_said_so(
    harness: Harness, status: grpc.StatusCode, capsys: pytest.CaptureFixture[str]
) -> None:
    # The SDK raises its bare WorkflowUpdateRPCTimeoutOrCancelledError for a CANCELLED (a
    # server under load) or DEADLINE_EXCEEDED Temporal answers an update with: the CLI
    # printed a traceback, REST said "no worker answered for the Run in time".
    workflow_id, _ = await _asking_run(harness, f"k-{uuid.uuid4().hex[:8]}")
    async with relayed_client(harness) as (relay, client):
        relay.fail_next("UpdateWorkflowExecution", status)
        with pytest.raises(WorkflowUpdateRPCTimeoutOrCancelledError) as ended:
            async with asyncio.timeout(BOUND):
                await client.steer(workflow_id, "hurry", scope=harness.scope)
        assert not isinstance(ended.value, UpdateUnanswered)
        problem = problem_of(ended.value)
        relay.fail_next("UpdateWorkflowExecution", status)
        argv = ["steer", workflow_id, "hurry", "--address", relay.target, "--tenant", "acme"]
        async with asyncio.timeout(BOUND):
            exit_status = await asyncio.to_thread(main, [*argv, "--idempotency-key", "s1"])
    assert relay.of("UpdateWorkflowExecution") == [status, status]
    said = (
        f"Temporal ended the update psych.steer ({status.name}: "
        "the relay answers " + status.name + " (scripted)) before the Run answered it"
    )
    assert isinstance(ended.value, UpdateEndedByTemporal), ended.value
    assert ended.value.why == (
        f"Run {workflow_id}: {said}; it may still be applied: read the Run's state before "
        "sending it again (sent under an idempotency key, it could be sent again safely)"
    )
    copy = pickle.loads(pickle.dumps(ended.value))
    assert (type(copy), copy.why, copy.status) == (
        UpdateEndedByTemporal,
        ended.value.why,
        ended.value.status,
    )
    assert problem is not None, ended.value
    assert (problem.status, problem.kind) == (503, "temporal"), problem
    assert problem.detail == (
        f"{said}; it may still be applied: read the Run before sending it again, or send it "
        "again under the same Idempotency-Key"
    )
    assert exit_status == 1
    line = capsys.readouterr().err
    assert line == (
        f"psych: Run {workflow_id}: {said}; it may still be applied: send it again under the "
        "same idempotency key ('s1'), or ask `taken` with it, to learn its outcome: it is "
        "applied at most once\n"
    ), line


@pytest.mark.timeout(120)
async def test_an_oauth_callbacks_resume_temporal_ends_is_a_page_saying_so(
    harness: Harness,
) -> None:
    # The callback's page knew NotTakenInTime and RPCError, not the SDK's error of a
    # CANCELLED Temporal answers the update with: the person got a bare 500.
    store = MemoryTokenStore()
    waiting = Waiting(workflow_id=f"psych-acme-{uuid.uuid4().hex[:8]}", tenant="acme", id="c-1")
    await store.put(index_key("s1"), waiting.model_dump_json().encode())
    async with relayed_client(harness) as (relay, client):
        relay.fail_next("UpdateWorkflowExecution", grpc.StatusCode.CANCELLED)
        async with asyncio.timeout(BOUND):
            done = await complete_authorization(client, store, {"code": "c", "state": "s1"})
    assert relay.of("UpdateWorkflowExecution") == [grpc.StatusCode.CANCELLED]
    assert (done.ok, done.workflow_id) == (False, waiting.workflow_id)
    assert done.message == (
        "the answer arrived, but Temporal ended the Run's update (CANCELLED) before the Run "
        "answered it: the Run may go on if it was taken"
    )


@pytest.mark.timeout(120)
async def test_an_update_of_a_settled_run_no_worker_reads_waits_its_bound(
    harness: Harness,
) -> None:
    # Temporal refuses the update of a settled Run NOT_FOUND at once; the client then asked
    # what the Run kept of it (10 s) and its state (the server's default, ~30 s): with no
    # worker, 39 s past the 2 s bound, ending in "no poller seen ..." (DEADLINE_EXCEEDED).
    workflow_id, _ = await _settled_run(harness)
    started = time.monotonic()
    with pytest.raises(Refused) as refused:
        async with asyncio.timeout(BOUND):
            await harness.client.steer(
                workflow_id, "hi", scope=harness.scope, idempotency_key="s1", update_timeout=SHORT
            )
    waited = time.monotonic() - started
    assert waited < SHORT.total_seconds() + 3, waited
    assert refused.value.kind == RefusalKind.NOT_SUSPENDED
    assert str(refused.value) == (
        f"{workflow_id} has settled (no worker answered how within 2 s: `status` says it "
        "once one polls the Run's task queue)"
    )
    # ``taken`` asked what the Run kept of it 10 s, whatever its bound.
    started = time.monotonic()
    async with asyncio.timeout(BOUND):
        taken = await harness.client.taken(
            workflow_id, "s1", scope=harness.scope, update_timeout=SHORT
        )
    assert taken is None
    waited = time.monotonic() - started
    assert waited < SHORT.total_seconds() + 3, waited
