"""A stream of a continued Run, resumed from a record the Run wrote after the shared
follower's first query, while that follower still reads the Run's earlier executions: it
resumes after that record. An earlier execution's records query answers that execution's
own last seq, not the Run's, so it is no proof that the record was never written.

Real dev server and worker, the fake model. The shared follower's query of the Run's
first execution is held (a client interceptor, by run id) until the resumed stream has
joined, so that the next execution's query is made after it joined, whatever the load.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio.client import Client, Interceptor, OutboundInterceptor, QueryWorkflowInput

from psych_runtime.activities.versions import FileVersionStore
from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import (
    QUERY_RECORDS,
    PsychClient,
    Record,
    RecordsPage,
    RecordsQuery,
)

from ._waiting import eventually, is_waiting, state_when
from .conftest import Harness

pytestmark = pytest.mark.e2e


class _HoldFirst(Interceptor):
    """Holds the first query of one execution (by run id) until ``release`` is set."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.held = asyncio.Event()
        self.release = asyncio.Event()

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _Holding(next, self)


class _Holding(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, gate: _HoldFirst) -> None:
        super().__init__(next)
        self.gate = gate

    async def query_workflow(self, input: QueryWorkflowInput) -> Any:
        if input.run_id == self.gate.run_id and not self.gate.held.is_set():
            self.gate.held.set()
            await self.gate.release.wait()
        return await super().query_workflow(input)


async def test_a_stream_resumed_while_the_follower_reads_earlier_executions(
    harness: Harness,
) -> None:
    @harness.registry.register
    def step(n: int) -> str:
        """One step."""
        return f"step {n} done"

    spec = (
        AgentBuilder("stepper", registry=harness.registry)
        .model("fake-model")
        .tool("step")
        .suspension(may_ask_questions=True)
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("step", {"n": 1})),
        Reply.tool_calls(ToolCall("step", {"n": 2})),
        Reply.tool_calls(ToolCall("ask_question", {"question": "Go on?"}, id="q1")),
        Reply.text("all done"),
    )
    async with harness.worker():
        run = await harness.client.dispatch(
            spec, "take the steps", scope=harness.scope, continue_after_events=1
        )
        last = (
            await state_when(harness.client, run, harness.scope, is_waiting, what="the question")
        ).last_seq
        current: RecordsPage = await harness.env.client.get_workflow_handle(run.workflow_id).query(
            QUERY_RECORDS, RecordsQuery(after=0), result_type=RecordsPage
        )
        assert len(current.earlier) >= 2, current.earlier  # two executions before this one
        gate = _HoldFirst(current.earlier[0].run_id)
        config = harness.env.client.config()
        config["interceptors"] = [gate]
        gated = PsychClient(
            Client(**config),
            store=FileVersionStore(harness.home / "versions"),
            task_queue=harness.settings.task_queue,
            registry=harness.registry,
        )

        async def read(after: int) -> list[Record]:
            return [record async for record in gated.stream(run, scope=harness.scope, after=after)]

        # A stream from the start: its follower asked the current execution (last seq
        # `last`) and now reads the first execution, held.
        whole = asyncio.create_task(read(0))
        async with asyncio.timeout(30):
            await gate.held.wait()
        # The Run goes on: record `last + 1` on is written after that first query.
        await harness.client.answer(run, "q1", "yes", scope=harness.scope)
        await harness.client.result(run, scope=harness.scope)
        settled = (await harness.client.status(run, scope=harness.scope)).last_seq
        # A client that read record `last + 1` elsewhere (another replica) resumes here.
        resumed = asyncio.create_task(read(last + 1))

        async def joined() -> bool:
            return gated.follows._runs[run.workflow_id].users == 2

        await eventually(joined, within=30, what="the resumed stream to join the follower")
        gate.release.set()
        async with asyncio.timeout(60):
            tail = await resumed
            everything = await whole

    assert [r.seq for r in everything] == list(range(1, settled + 1))
    assert [r.seq for r in tail] == list(range(last + 2, settled + 1))
