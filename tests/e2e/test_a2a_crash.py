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
