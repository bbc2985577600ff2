"""A closed Run read with no worker while Temporal stops answering: each read waits the
reader's timeout at most, then says what was not answered. Reading a Temporal-cancelled
Run's history (``_cancelled.py``) names the history and the timeout (``HistoryNotRead``,
not a bare timeout that REST answers as a worker's); an A2A stream's end (``_cut_short``)
raises, where it waited on Temporal with no timeout (``closed_without_settling``). Temporal
is the session's dev server behind a loopback TCP relay that stops relaying on cue."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from psych_runtime.activities.versions import FileVersionStore
from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers.serve._problems import problem_of
from psych_runtime.workers.serve.a2a._tasks import _cut_short
from psych_runtime.workflows import HistoryNotRead, PsychClient, RunStatus, TemporalUnanswered
from psych_runtime.workflows.client._cancelled import cancelled_reason

from ._waiting import eventually
from .conftest import Harness

pytestmark = pytest.mark.e2e

TIMEOUT = timedelta(seconds=1)


class Relay:
    """A loopback TCP relay to ``target`` that relays until ``stop()``, then holds every
    byte (its connections stay open: a server that hangs)."""

    def __init__(self, target: str) -> None:
        host, _, port = target.rpartition(":")
        self.target = (host, int(port))
        self.relaying = asyncio.Event()
        self.relaying.set()
        self.tasks: set[asyncio.Task[None]] = set()

    def stop(self) -> None:
        self.relaying.clear()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                await self.relaying.wait()
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        to_reader, to_writer = await asyncio.open_connection(*self.target)
        for task in (self._pipe(reader, to_writer), self._pipe(to_reader, writer)):
            piped = asyncio.create_task(task)
            self.tasks.add(piped)
            piped.add_done_callback(self.tasks.discard)

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[str]:
        server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            yield f"127.0.0.1:{port}"
        finally:
            server.close()
            for task in list(self.tasks):
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)


async def _cancelled_run(harness: Harness) -> str:
    """A Run that asked, then Temporal cancelled; its workflow id. Its worker is gone."""
    spec = AgentBuilder(f"hung{uuid.uuid4().hex[:8]}").model("fake-model")
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("ask_question", {"question": "Which day?"}, id="q1"))
    )
    async with harness.worker():
        run = await harness.client.dispatch(
            spec.suspension(may_ask_questions=True).build(), "book it", scope=harness.scope
        )

        async def asking() -> bool:
            state = await harness.client.status(run, scope=harness.scope)
            return state.status is RunStatus.SUSPENDED

        await eventually(asking, what="the Run to ask")
        handle = harness.client.temporal.get_workflow_handle(run.workflow_id)
        await handle.cancel()

        async def closed() -> bool:
            return (await handle.describe()).status is WorkflowExecutionStatus.CANCELED

        await eventually(closed, what="the workflow to end cancelled")
    return run.workflow_id


@contextlib.asynccontextmanager
async def relayed(harness: Harness) -> AsyncIterator[tuple[Relay, Client]]:
    """A client of the harness's Temporal through a ``Relay``, connected."""
    relay = Relay(harness.env.client.service_client.config.target_host)
    async with relay.serving() as address:
        env = harness.env.client
        temporal = await Client.connect(
            address, namespace=env.namespace, data_converter=env.data_converter
        )
        yield relay, temporal


@pytest.mark.timeout(90)
async def test_a_cancelled_runs_history_not_answered_says_so_within_the_timeout(
    harness: Harness,
) -> None:
    workflow_id = await _cancelled_run(harness)
    async with relayed(harness) as (relay, temporal):
        execution = temporal.get_workflow_handle(workflow_id)
        relay.stop()
        started = time.monotonic()
        with pytest.raises(HistoryNotRead) as unread:
            async with asyncio.timeout(15):
                await cancelled_reason(temporal, execution, workflow_id, TIMEOUT)
    assert time.monotonic() - started < 10
    assert unread.value.why.startswith(
        f"Temporal did not answer a page of the history of Run {workflow_id} within 1 s "
        "(after 0 events read: "
    )
    # REST answers it as Temporal's, not as a worker's silence.
    problem = problem_of(unread.value)
    assert problem is not None
    assert (problem.status, problem.kind, problem.detail) == (503, "temporal", unread.value.why)


async def _drained(events: AsyncIterator[object]) -> None:
    async for _ in events:
        pass


@pytest.mark.timeout(90)
async def test_a_streams_end_waits_on_temporal_the_timeout_at_most(harness: Harness) -> None:
    workflow_id = await _cancelled_run(harness)
    failures: list[tuple[str, Exception]] = []
    async with relayed(harness) as (relay, temporal):
        client = PsychClient(
            temporal,
            store=FileVersionStore(harness.home / "versions"),
            task_queue=harness.settings.task_queue,
            registry=harness.registry,
        )
        ending = _cut_short(
            client,
            workflow_id,
            harness.scope,
            TIMEOUT,
            lambda what, err: failures.append((what, err)),
        )
        relay.stop()
        started = time.monotonic()
        with pytest.raises(RPCError) as ended:
            await asyncio.wait_for(_drained(ending), 15)
    assert time.monotonic() - started < 10
    assert [what for what, _ in failures] == ["closed execution"]
    # Each read needs no worker: Temporal's silence, said so (REST and A2A: 503 temporal),
    # not a query no worker answered (review 12-07: both were bare timeouts).
    for err in (failures[0][1], ended.value):
        assert isinstance(err, TemporalUnanswered), repr(err)
        assert err.why.startswith(
            f"Temporal did not answer a describe of Run {workflow_id} within 1 s ("
        )
        problem = problem_of(err)
        assert problem is not None
        assert (problem.status, problem.kind, problem.detail) == (503, "temporal", err.why)
