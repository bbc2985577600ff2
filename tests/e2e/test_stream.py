"""Followers get a Run's records pushed, on the real dev server (``PsychClient.stream``).

The follower long-polls the Run's history and reads the records query only when a workflow
task completed: records arrive in order from ``after=N``, an idle Run is not asked at all,
a worker restart loses and repeats nothing, and followers add nothing to the Run's history.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from psych_runtime.specs import AgentBuilder, AgentSpec, NotFound, Scope, SpecError, ToolRegistry
from psych_runtime.testing import FakeModel, Reply, ToolCall
from psych_runtime.workflows import (
    PsychClient,
    Record,
    RunHandle,
    RunSettled,
    RunStatus,
    Suspended,
    ToolCallFinished,
)
from psych_runtime.workflows.client._follow import RecordFollower

from ._crash import doomed_worker
from ._waiting import eventually, is_suspended, state_when
from .conftest import Harness

pytestmark = pytest.mark.e2e

FOLLOW_WITHIN = 30.0
"""Wall seconds a follower has to see a Run settle."""


def lookup_agent(registry: ToolRegistry) -> AgentSpec:
    @registry.register
    def lookup(order_id: str) -> str:
        """Look an order up."""
        return f"order {order_id}: delivered"

    return AgentBuilder("looker", registry=registry).model("fake-model").tool("lookup").build()


def lookups(fake: FakeModel, turns: int) -> None:
    """Script ``turns`` turns: each but the last looks an order up, the last answers."""
    for turn in range(1, turns):
        fake.enqueue(Reply.tool_calls(ToolCall("lookup", {"order_id": str(turn)})))
    fake.enqueue(Reply.text("All delivered."))


async def collect(
    client: PsychClient, run: RunHandle | str, scope: Scope, after: int = 0
) -> list[Record]:
    async with asyncio.timeout(FOLLOW_WITHIN):
        return [record async for record in client.stream(run, scope=scope, after=after)]


def assert_whole(records: Sequence[Record], after: int = 0) -> None:
    """Gapless and in order from ``after + 1``, ending with the Run's settling."""
    assert [r.seq for r in records] == list(range(after + 1, after + 1 + len(records)))
    assert isinstance(records[-1], RunSettled)
    assert sum(isinstance(r, RunSettled) for r in records) == 1


async def test_records_arrive_in_order_from_after(harness: Harness) -> None:
    spec = lookup_agent(harness.registry)
    lookups(harness.fake, 4)
    async with harness.worker():
        run = await harness.client.dispatch(spec, "check orders 1-3", scope=harness.scope)
        # The first stream starts the client's shared follower at 3; the one asking for
        # older records gets a follower of its own.
        from_three, live = await asyncio.gather(
            collect(harness.client, run, harness.scope, after=3),
            collect(harness.client, run, harness.scope),
        )
        assert_whole(live)
        assert from_three == live[3:]
        assert [r.call_id for r in live if isinstance(r, ToolCallFinished)] != []
        # Resuming from the middle gives the rest, and the same records.
        rest = await collect(harness.client, run, harness.scope, after=5)
    assert_whole(rest, after=5)
    assert rest == live[5:]


async def test_a_follower_of_a_settled_run_gets_every_record_and_ends(harness: Harness) -> None:
    spec = lookup_agent(harness.registry)
    lookups(harness.fake, 2)
    async with harness.worker():
        run = await harness.client.dispatch(spec, "check order 1", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        assert result.status is RunStatus.COMPLETED
        records = await collect(harness.client, run, harness.scope)
        assert_whole(records)
        assert records == list((await harness.client.records(run, scope=harness.scope)).records)
        # Caught up already: nothing after the last record, and it still ends.
        assert await collect(harness.client, run, harness.scope, after=records[-1].seq) == []


async def test_a_negative_after_is_refused(harness: Harness) -> None:
    # Taken, it started the Run's shared follower counting from -1 (records from seq 1
    # stored as if from 0): a stream from 0 that joined it was sent the records from 2.
    spec = lookup_agent(harness.registry)
    lookups(harness.fake, 2)
    async with harness.worker():
        run = await harness.client.dispatch(spec, "check order 1", scope=harness.scope)
        await harness.client.result(run, scope=harness.scope)
        with pytest.raises(SpecError, match="after is the last seq the caller has"):
            await collect(harness.client, run, harness.scope, after=-1)
        records = await collect(harness.client, run, harness.scope)
    assert_whole(records)


def asker() -> AgentSpec:
    return AgentBuilder("asker").model("fake-model").suspension(may_ask_questions=True).build()


def ask_then_answer(fake: FakeModel) -> None:
    fake.enqueue(
        Reply.tool_calls(ToolCall("ask_question", {"question": "Which order?"}, id="q1")),
        Reply.text("Order 42 it is."),
    )


async def test_an_idle_run_is_not_queried_while_it_waits(harness: Harness) -> None:
    """Polling every 250 ms would ask eight times in two seconds of suspension."""
    ask_then_answer(harness.fake)
    async with harness.worker():
        run = await harness.client.dispatch(asker(), "which order?", scope=harness.scope)
        follower = RecordFollower(harness.env.client, run.workflow_id)
        seen: list[Record] = []

        async def follow() -> None:
            async for record in follower.records():
                seen.append(record)

        task = asyncio.create_task(follow())

        async def suspension_seen() -> bool:
            return any(isinstance(r, Suspended) for r in seen)

        await eventually(suspension_seen, what="the follower to see the suspension")
        await asyncio.sleep(0.5)  # the follower's reads of the suspending task are done
        before = follower.queries
        await asyncio.sleep(2.0)
        assert follower.queries == before
        await harness.client.answer(run, "q1", "42", scope=harness.scope)
        await asyncio.wait_for(task, FOLLOW_WITHIN)
    assert_whole(seen)
    assert follower.queries > before


async def history_length(env: WorkflowEnvironment, run: RunHandle) -> int:
    history = await env.client.get_workflow_handle(run.workflow_id).fetch_history()
    return len(history.events)


async def followed_run(harness: Harness, spec: AgentSpec, followers: int) -> tuple[int, list[Any]]:
    """One scripted 3-turn Run with ``followers`` following it from its start: its history
    length and what each follower got."""
    lookups(harness.fake, 3)
    run = await harness.client.dispatch(spec, "check orders", scope=harness.scope)
    got = await asyncio.gather(
        *(collect(harness.client, run, harness.scope) for _ in range(followers))
    )
    await harness.client.result(run, scope=harness.scope)
    return await history_length(harness.env, run), got


async def test_followers_do_not_grow_the_runs_history(harness: Harness) -> None:
    spec = lookup_agent(harness.registry)
    hub = harness.client.follows
    async with harness.worker():
        alone, _ = await followed_run(harness, spec, 0)
        before = hub.queries_made()
        one, _ = await followed_run(harness, spec, 1)
        by_one = hub.queries_made() - before
        watched, got = await followed_run(harness, spec, 10)
        by_ten = hub.queries_made() - before - by_one
    assert watched == one == alone
    assert len(got) == 10
    for records in got:
        assert_whole(records)
        assert records == got[0]
    # Ten streams of one Run through one client share a follower: about one's queries.
    assert 0 < by_ten <= 2 * by_one


async def test_a_follower_goes_on_across_a_worker_restart(
    dev_env: WorkflowEnvironment, fake: FakeModel, tmp_path: Path
) -> None:
    scope = Scope(tenant="acme", principal="tester")
    ask_then_answer(fake)
    task_queue = f"stream-{os.getpid()}-{id(tmp_path) % 100000}"
    async with doomed_worker(dev_env.client, task_queue, tmp_path, fake.base_url) as doomed:
        client = doomed.psych
        run = await client.dispatch(asker(), "which order?", scope=scope)
        early = asyncio.create_task(collect(client, run, scope))
        await state_when(client, run, scope, is_suspended, what="a question")
        os.kill(doomed.proc.pid, signal.SIGKILL)
        await doomed.proc.wait()
        # Started with no worker alive: its first read waits for the next worker.
        late = asyncio.create_task(collect(client, run, scope))
        await asyncio.sleep(1.5)
        assert not early.done() and not late.done()
        async with doomed.survivor():
            await client.answer(run, "q1", "42", scope=scope)
            first, second = await asyncio.gather(early, late)
    assert_whole(first)
    assert second == first
    assert isinstance(first[-1], RunSettled) and first[-1].status is RunStatus.COMPLETED


async def test_a_follower_ends_when_the_run_is_terminated_and_refuses_no_run(
    harness: Harness,
) -> None:
    ask_then_answer(harness.fake)
    async with harness.worker():
        run = await harness.client.dispatch(asker(), "which order?", scope=harness.scope)
        following = asyncio.create_task(collect(harness.client, run, harness.scope))
        await state_when(harness.client, run, harness.scope, is_suspended, what="a question")
        await harness.env.client.get_workflow_handle(run.workflow_id).terminate("operator")
        records = await following
        with pytest.raises(NotFound):
            await collect(harness.client, "psych-acme-nosuchrun", harness.scope)
    # Closed without settling its record: every record it wrote, then the stream ends.
    assert [r.seq for r in records] == list(range(1, len(records) + 1))
    assert isinstance(records[-1], Suspended)
