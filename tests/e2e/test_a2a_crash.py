"""A worker SIGKILLed while a message to an A2A peer is in flight: the message is never
sent again (a peer message is not safe to repeat) and the call is recorded UNKNOWN."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from psych_runtime.specs import AgentBuilder, Scope
from psych_runtime.testing import FakeModel, Reply, ToolCall
from psych_runtime.workflows import RunStatus
from psych_runtime.workflows.kernel._tool_calls import UNKNOWN_OUTCOME
from tests.a2a.peer import serve_peer

from ._crash import doomed_worker
from ._waiting import is_waiting, state_when

pytestmark = pytest.mark.e2e


async def test_a_peer_message_in_flight_is_never_resent_and_recorded_unknown(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    scope = Scope(tenant="acme")
    task_queue = f"a2a-crash-{uuid.uuid4().hex[:12]}"
    async with serve_peer(("book",)) as peer, FakeModel(models=("fake-model",)) as fake:
        fake.enqueue(
            Reply.tool_calls(ToolCall("travel__book", {"message": "slow:6"})),
            Reply.text("I could not confirm the booking; please check."),
        )
        spec = AgentBuilder("booker").model("fake-model").a2a_peer("travel", peer.url).build()
        async with doomed_worker(dev_env.client, task_queue, tmp_path, fake.base_url) as doomed:
            client = doomed.psych
            run = await client.dispatch(spec, "Book it", scope=scope)
            await doomed.kill_when(lambda: len(peer.requests) == 1)
            async with doomed.survivor():
                result = await asyncio.wait_for(client.result(run, scope=scope), timeout=90)
                report = await client.report(run, scope=scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    [call] = report.tool_calls
    assert (call.tool, call.status) == ("travel__book", "unknown")
    assert call.result == UNKNOWN_OUTCOME
    # The peer was asked once; nothing sent it the message again.
    assert peer.texts() == ["slow:6"]


async def test_a_long_peer_task_is_waited_for_durably_across_a_worker_kill(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    scope = Scope(tenant="acme")
    task_queue = f"a2a-long-{uuid.uuid4().hex[:12]}"
    async with serve_peer(("book",)) as peer, FakeModel(models=("fake-model",)) as fake:
        fake.enqueue(
            Reply.tool_calls(ToolCall("travel__book", {"message": "slow:14"})),
            Reply.text("Booked."),
        )
        spec = AgentBuilder("booker").model("fake-model").a2a_peer("travel", peer.url).build()
        async with doomed_worker(dev_env.client, task_queue, tmp_path, fake.base_url) as doomed:
            client = doomed.psych
            run = await client.dispatch(spec, "Book it", scope=scope)

            # Past the call's hold the Run waits on the peer's task: no activity is open.
            state = await state_when(
                client, run, scope, is_waiting, what="the Run to wait on the peer task", within=30
            )
            [pending] = state.pending
            assert pending.id.startswith("a2a:travel:")
            assert "is working" in (pending.question or "")
            await doomed.kill_when(lambda: True)
            async with doomed.survivor():
                result = await asyncio.wait_for(client.result(run, scope=scope), timeout=90)
                report = await client.report(run, scope=scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    [call] = report.tool_calls
    assert call.status == "ok"
    assert "done slowly" in (call.result or "") and "state completed" in (call.result or "")
    # Sent once; read on the Run's timer until it ended, by both workers.
    assert peer.texts() == ["slow:14"]
    assert result.totals.tool_calls == 1
