"""A stream's end of a task whose Run completed while no worker answers its state: the
task's final status and its answer artifact (marked ``cut_short``, the Run's reason
saying so) reach the stream from the closed execution, as GetTask reads it
(``PsychClient.closed``), whether the records were cut short once the execution closed
(``_cut_short``) or ended without the Run's ``RunSettled``. Before, the stream's end
queried the Run's state: cut short, it failed ``no-worker``; ended, it told the task
``failed``, "the Run ended without settling", though GetTask answered it completed.
When every read of the end fails (the closed execution's and the state's), the stream
fails with the read's error, never telling an end it does not know (before, its records
ended, it told the task ``failed``). Driven by ``a2a-sdk``'s own client against
``psych serve`` on loopback and the session's dev server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import TypeVar

import pytest
from a2a.types import Artifact, GetTaskRequest, StreamResponse, TaskState
from a2a.utils.errors import InternalError
from temporalio.service import RPCError, RPCStatusCode

from psych_runtime.activities.a2a import TERMINAL
from psych_runtime.specs import AgentBuilder, Scope
from psych_runtime.testing import Reply
from psych_runtime.workflows import ClosedRun, Delta, PsychClient, Record, RunHandle, RunState

from ._serve import ACME, served
from .conftest import Harness
from .test_a2a_cut_answer import CUT_TEXT, answers, told
from .test_a2a_serve import a2a_client, collect, last_status, user

pytestmark = pytest.mark.e2e

QUERY_TIMEOUT = 2.0


class RecordsLost(PsychClient):
    """A serve client that gets none of a Run's records (as when its worker stopped after
    the Run settled, before they were read): a stream of it waits for the Run's workflow
    to close, then ends (``hang``: never ends), and from then on the Run's state is
    never answered, as with no worker polling."""

    hang: bool
    settled: set[str]

    # One signature for the overloads by ``deltas``: the serve calls it either way.
    async def stream(  # type: ignore[override]
        self,
        run: RunHandle | str,
        *,
        scope: Scope,
        after: int = 0,
        deltas: bool = False,
        after_delta: tuple[str, int] | None = None,
    ) -> AsyncIterator[Record | Delta]:
        workflow_id = run if isinstance(run, str) else run.workflow_id
        await super().result(workflow_id, scope=scope)
        self.settled.add(workflow_id)
        if self.hang:
            await asyncio.Event().wait()
        nothing: tuple[Record | Delta, ...] = ()
        for item in nothing:
            yield item

    async def status(
        self, run: RunHandle | str, *, scope: Scope, query_timeout: timedelta | None = None
    ) -> RunState:
        workflow_id = run if isinstance(run, str) else run.workflow_id
        if workflow_id in self.settled:
            raise RPCError(
                "no worker answered within the query timeout",
                RPCStatusCode.DEADLINE_EXCEEDED,
                b"",
            )
        return await super().status(run, scope=scope, query_timeout=query_timeout)


Serving = TypeVar("Serving", bound=RecordsLost)


def cut_twice(harness: Harness, agent: str, kind: type[Serving], hang: bool) -> Serving:
    """``agent`` published, its model slow enough that a send reads the Run working (its
    stream then follows it) and cut at the output limit twice, so the Run completes with
    the cut text, saying so; and the serve client ``kind`` for it (``hang``: see
    ``RecordsLost``)."""
    harness.client.publish(AgentBuilder(agent).model("fake-model").build())
    harness.fake.enqueue(
        Reply.stall(2, then=Reply.text(CUT_TEXT, cut_off=True)),
        Reply.text(CUT_TEXT, cut_off=True),
    )
    serving = kind(
        harness.client.temporal, store=harness.client.store, task_queue=harness.client.task_queue
    )
    serving.hang = hang
    serving.settled = set()
    return serving


def answer_artifacts(events: list[StreamResponse]) -> list[Artifact]:
    """The ``answer`` artifacts a stream's ``events`` carried."""
    return [
        e.artifact_update.artifact
        for e in events
        if e.HasField("artifact_update") and e.artifact_update.artifact.name == "answer"
    ]


@pytest.mark.timeout(90)
@pytest.mark.parametrize("hang", [True, False], ids=["cut-short", "records-ended"])
async def test_a_streams_end_is_read_from_the_closed_execution(
    harness: Harness, hang: bool
) -> None:
    agent = f"a2a_stream_end_{'cut' if hang else 'ended'}"
    serving = cut_twice(harness, agent, RecordsLost, hang)
    async with (
        harness.worker(),
        served(harness, query_timeout_seconds=QUERY_TIMEOUT, client=serving) as base,
        a2a_client(base, agent, ACME) as streams,
        a2a_client(base, agent, ACME, streaming=False) as client,
    ):
        async with asyncio.timeout(60):
            events = await collect(streams.send_message(user("How?")))
        task_id = events[0].task.id
        got = await client.get_task(GetTaskRequest(id=task_id))
    assert serving.settled == {f"psych-acme-{task_id}"}  # no record and no state was read
    assert events[0].task.status.state == TaskState.TASK_STATE_WORKING
    streamed = answer_artifacts(events)
    end = last_status(events)
    assert end.state == TaskState.TASK_STATE_COMPLETED
    assert told(end).startswith("answered, cut short:")
    assert answers(streamed) == [(CUT_TEXT, {"cut_short": True})]
    # As GetTask reads it.
    assert end == got.status
    assert list(streamed) == list(got.artifacts)


class ClosedUnread(RecordsLost):
    """A serve client that gets none of a Run's records (``RecordsLost``) and whose
    read of the closed execution (``closed``) fails once the Run settled, as an RPC to
    Temporal may (its history read refused for now); its state, a worker answers."""

    async def status(
        self, run: RunHandle | str, *, scope: Scope, query_timeout: timedelta | None = None
    ) -> RunState:
        return await PsychClient.status(self, run, scope=scope, query_timeout=query_timeout)

    async def closed(
        self, run: RunHandle | str, *, scope: Scope, rpc_timeout: timedelta | None = None
    ) -> ClosedRun | None:
        workflow_id = run if isinstance(run, str) else run.workflow_id
        if workflow_id in self.settled:
            raise RPCError("history read refused for now", RPCStatusCode.UNAVAILABLE, b"")
        return await super().closed(run, scope=scope, rpc_timeout=rpc_timeout)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("hang", [True, False], ids=["cut-short", "records-ended"])
async def test_a_streams_end_whose_closed_read_fails_is_read_from_the_state(
    harness: Harness, hang: bool
) -> None:
    """A failed read of the closed execution is no end of its own: the Run's state, which
    a worker answers, tells the task's end, as before the close event was read first.
    Before: cut short, the stream failed with the RPCError; its records ended, the task
    ended ``failed``, "the Run ended without settling"."""
    agent = f"a2a_stream_end_unread_{'cut' if hang else 'ended'}"
    serving = cut_twice(harness, agent, ClosedUnread, hang)
    async with (
        harness.worker(),
        served(harness, query_timeout_seconds=QUERY_TIMEOUT, client=serving) as base,
        a2a_client(base, agent, ACME) as streams,
    ):
        async with asyncio.timeout(60):
            events = await collect(streams.send_message(user("How?")))
    task_id = events[0].task.id
    assert serving.settled == {f"psych-acme-{task_id}"}
    streamed = answer_artifacts(events)
    end = last_status(events)
    assert end.state == TaskState.TASK_STATE_COMPLETED, told(end)
    assert told(end).startswith("answered, cut short:")
    assert answers(streamed) == [(CUT_TEXT, {"cut_short": True})]


class NothingRead(ClosedUnread):
    """A serve client that gets none of a Run's records and none of its reads once the
    Run settled: its closed execution's read fails (``ClosedUnread``) and its state is
    never answered (``RecordsLost``), while Temporal still describes the execution (not
    running)."""

    async def status(
        self, run: RunHandle | str, *, scope: Scope, query_timeout: timedelta | None = None
    ) -> RunState:
        return await RecordsLost.status(self, run, scope=scope, query_timeout=query_timeout)


async def _into(events: list[StreamResponse], stream: AsyncIterator[StreamResponse]) -> None:
    """Each event of ``stream`` into ``events``, until it ends (or fails)."""
    async for event in stream:
        events.append(event)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("hang", [True, False], ids=["cut-short", "records-ended"])
async def test_a_streams_end_nothing_reads_is_an_error_not_a_failed_task(
    harness: Harness, hang: bool
) -> None:
    """When every read of how the Run ended fails, the stream ends with the read's error
    (an ``InternalError``, REST's ``no-worker``), as a cut-short stream's does: never a
    terminal state it does not know. Before, its records ended, the task was told
    ``failed``, "the Run ended without settling", though the Run completed: the peer
    stopped following a task it took for failed."""
    agent = f"a2a_stream_end_nothing_{'cut' if hang else 'ended'}"
    serving = cut_twice(harness, agent, NothingRead, hang)
    events: list[StreamResponse] = []
    async with (
        harness.worker(),
        served(harness, query_timeout_seconds=QUERY_TIMEOUT, client=serving) as base,
        a2a_client(base, agent, ACME) as streams,
    ):
        async with asyncio.timeout(60):
            with pytest.raises(InternalError) as unread:
                await _into(events, streams.send_message(user("How?")))
        task_id = events[0].task.id
        # The Run did complete: GetTask, with its reads answered, says so.
        serving.settled.clear()
        async with a2a_client(base, agent, ACME, streaming=False) as client:
            got = await client.get_task(GetTaskRequest(id=task_id))
    assert got.status.state == TaskState.TASK_STATE_COMPLETED
    assert events[0].task.status.state == TaskState.TASK_STATE_WORKING
    said = [e.status_update.status.state for e in events if e.HasField("status_update")]
    assert not [state for state in said if state in TERMINAL], said
    assert unread.value.message == (
        "following the Run failed: no worker answered for the Run in time"
    )
    assert unread.value.data == {"type": "urn:psych:problem:no-worker", "status": "503"}
