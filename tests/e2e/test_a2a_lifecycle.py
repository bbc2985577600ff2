"""A2A peer tasks and the Run's own life: a Run aborted (or whose wait expires) while it
waits on a peer task (durably, inside the call's hold, or for its person's answer to the
peer's question) asks the peer to cancel that task; a worker's ``a2a:`` settings (the
global settings file) decide how long a call holds before the Run waits durably; a peer
asking for other authentication mid-task settles the call with an error naming the peer
and what it asked. Real Runs on the dev server, a scripted ``a2a-sdk`` peer on loopback."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from psych_runtime.activities.a2a import A2aSettings
from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import Resumed, RunState, RunStatus
from tests.a2a.peer import serve_peer

from ._waiting import eventually, is_waiting, state_when
from .conftest import Harness

pytestmark = pytest.mark.e2e


async def test_aborting_a_run_waiting_on_a_peer_task_cancels_that_task(
    harness: Harness,
) -> None:
    harness.settings = dataclasses.replace(harness.settings, a2a=A2aSettings(hold_seconds=0.5))
    async with serve_peer(("book",)) as peer:
        spec = (
            AgentBuilder("lifecycle_booker")
            .model("fake-model")
            .a2a_peer("travel", peer.url, credential="orders-key")
            .build()
        )
        harness.fake.enqueue(Reply.tool_calls(ToolCall("travel__book", {"message": "slow:60"})))
        async with harness.worker():
            run = await harness.client.dispatch(spec, "Book it", scope=harness.scope)
            state = await state_when(
                harness.client, run, harness.scope, is_waiting, what="the wait on the peer task"
            )
            [pending] = state.pending
            assert pending.id == "a2a:travel:task-1"
            await harness.client.abort(run, scope=harness.scope, reason="changed my mind")
            result = await asyncio.wait_for(harness.client.result(run, scope=harness.scope), 90)
            report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.ABORTED, result.reason
    # The peer was asked, once, with the peer's credential, to cancel the task it started.
    assert peer.cancels == [("task-1", "Bearer s3cret")]
    [cancelled] = report.peer_cancels
    assert (cancelled.peer, cancelled.task_id, cancelled.state, cancelled.error) == (
        "travel",
        "task-1",
        "canceled",
        None,
    )
    assert peer.texts() == ["slow:60"]


async def test_aborting_a_run_while_its_call_holds_cancels_the_peer_task(
    harness: Harness,
) -> None:
    # A hold longer than the test: the abort reaches the call while it still reads the task.
    harness.settings = dataclasses.replace(harness.settings, a2a=A2aSettings(hold_seconds=600))
    async with serve_peer(("book",)) as peer:
        spec = (
            AgentBuilder("lifecycle_holding")
            .model("fake-model")
            .a2a_peer("travel", peer.url, credential="orders-key")
            .build()
        )
        harness.fake.enqueue(Reply.tool_calls(ToolCall("travel__book", {"message": "slow:600"})))
        async with harness.worker():
            run = await harness.client.dispatch(spec, "Book it", scope=harness.scope)

            async def _sent() -> bool:
                return peer.texts() == ["slow:600"]

            await eventually(_sent, within=30, what="the message at the peer")
            await harness.client.abort(run, scope=harness.scope, reason="changed my mind")
            result = await asyncio.wait_for(harness.client.result(run, scope=harness.scope), 90)

            # The call, cancelled in its hold, asks the peer to cancel the task it started
            # (the Run never learnt its id), with the peer's credential, while the worker runs.
            async def _cancelled() -> bool:
                return peer.cancels == [("task-1", "Bearer s3cret")]

            await eventually(_cancelled, within=30, what="the peer task's cancel")
    assert result.status is RunStatus.ABORTED, result.reason


async def test_the_settings_files_hold_decides_when_the_run_waits_durably(
    harness: Harness,
) -> None:
    # The default hold (5 s) would wait out this 2 s task inside the call; the file says 0.
    settings_file = harness.home / "settings.yaml"
    settings_file.write_text("a2a:\n  hold_seconds: 0\n")
    harness.settings = dataclasses.replace(harness.settings, settings_file=settings_file)
    async with serve_peer(("book",)) as peer:
        spec = (
            AgentBuilder("lifecycle_holder")
            .model("fake-model")
            .a2a_peer("travel", peer.url)
            .build()
        )
        harness.fake.enqueue(
            Reply.tool_calls(ToolCall("travel__book", {"message": "slow:2"})), Reply.text("Booked.")
        )
        async with harness.worker():
            run = await harness.client.dispatch(spec, "Book it", scope=harness.scope)
            result = await asyncio.wait_for(harness.client.result(run, scope=harness.scope), 90)
            records = (await harness.client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.COMPLETED, result.reason
    [resumed] = [r for r in records if isinstance(r, Resumed)]
    assert (resumed.id, resumed.by) == ("a2a:travel:task-1", "a2a peer travel")
    assert "done slowly" in (resumed.detail or "")
    assert peer.texts() == ["slow:2"]


async def test_a_peer_asking_for_other_auth_mid_task_is_a_tool_error_naming_it(
    harness: Harness,
) -> None:
    async with serve_peer(("book",)) as peer:
        spec = (
            AgentBuilder("lifecycle_auth")
            .model("fake-model")
            .a2a_peer("travel", peer.url, credential="orders-key")
            .build()
        )
        harness.fake.enqueue(
            Reply.tool_calls(
                ToolCall("travel__book", {"message": "auth:an OAuth token for the airline"})
            ),
            Reply.text("I cannot book without the airline's authorization."),
        )
        async with harness.worker():
            run = await harness.client.dispatch(spec, "Book it", scope=harness.scope)
            result = await asyncio.wait_for(harness.client.result(run, scope=harness.scope), 90)
            report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    [call] = report.tool_calls
    assert call.status == "error"
    text = call.result or ""
    assert "A2A peer 'travel' asks for authentication (auth-required)" in text
    assert "an OAuth token for the airline" in text
    assert "credential 'orders-key'" in text
    assert "s3cret" not in report.model_dump_json()
    # Nothing this Run does can satisfy it: the task is not left waiting at the peer.
    assert peer.cancels == [("task-1", "Bearer s3cret")]

    async def _sent_once() -> bool:
        return peer.texts() == ["auth:an OAuth token for the airline"]

    await eventually(_sent_once, within=10, what="the one message")


async def test_a_peers_question_goes_to_the_person_when_the_spec_allows_questions(
    harness: Harness,
) -> None:
    async with serve_peer(("ask",)) as peer:
        spec = (
            AgentBuilder("lifecycle_asker")
            .model("fake-model")
            .suspension(may_ask_questions=True)
            .a2a_peer("helper", peer.url)
            .build()
        )
        harness.fake.enqueue(
            Reply.tool_calls(ToolCall("helper__ask", {"message": "ask:which colour?"}, id="c1")),
            Reply.text("Blue it is."),
        )
        async with harness.worker():
            run = await harness.client.dispatch(spec, "Pick a colour", scope=harness.scope)
            state = await state_when(
                harness.client, run, harness.scope, is_waiting, what="the peer's question"
            )
            [pending] = state.pending
            assert (pending.reason, pending.id, pending.tool) == ("question", "c1", "helper__ask")
            assert pending.question == "A2A peer 'helper' asks (task task-1): which colour?"
            # The model was not asked: only the person answers.
            assert len(harness.fake.requests) == 1
            await harness.client.answer(run, pending.id, "blue", scope=harness.scope)
            result = await asyncio.wait_for(harness.client.result(run, scope=harness.scope), 90)
            report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    assert result.answer == "Blue it is."
    # The answer went to the peer in the task it asked in, as a message of its own.
    assert peer.texts() == ["ask:which colour?", "blue"]
    assert peer.requests[1].task_id == "task-1"
    assert peer.requests[1].message_id.endswith("/c1/answer-1")
    [call] = report.tool_calls
    assert call.status == "ok"
    assert "answered: blue" in (call.result or "") and "state completed" in (call.result or "")
    # The model read the peer's final answer as the call's result.
    [tool_message] = [m for m in harness.fake.requests[1]["messages"] if m["role"] == "tool"]
    assert "answered: blue" in tool_message["content"]


async def test_aborting_a_run_before_its_person_answers_a_peer_cancels_the_peer_task(
    harness: Harness,
) -> None:
    async with serve_peer(("ask",)) as peer:
        spec = (
            AgentBuilder("lifecycle_unanswered")
            .model("fake-model")
            .suspension(may_ask_questions=True)
            .a2a_peer("helper", peer.url, credential="orders-key")
            .build()
        )
        harness.fake.enqueue(
            Reply.tool_calls(ToolCall("helper__ask", {"message": "ask:which colour?"}, id="c1"))
        )
        async with harness.worker():
            run = await harness.client.dispatch(spec, "Pick a colour", scope=harness.scope)
            state = await state_when(
                harness.client, run, harness.scope, is_waiting, what="the peer's question"
            )
            [pending] = state.pending
            assert (pending.reason, pending.id) == ("question", "c1")
            await harness.client.abort(run, scope=harness.scope, reason="never mind")
            result = await asyncio.wait_for(harness.client.result(run, scope=harness.scope), 90)
            report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.ABORTED, result.reason
    # The task waited at the peer for an answer that will never come: the Run asked the
    # peer, once, with its credential, to cancel it, and recorded what the peer said.
    assert peer.cancels == [("task-1", "Bearer s3cret")]
    [cancelled] = report.peer_cancels
    assert (cancelled.peer, cancelled.task_id, cancelled.call_id, cancelled.state) == (
        "helper",
        "task-1",
        "c1",
        "canceled",
    )
    assert peer.texts() == ["ask:which colour?"]


async def test_a_question_the_peer_asks_after_a_durable_wait_goes_to_the_person(
    harness: Harness,
) -> None:
    harness.settings = dataclasses.replace(harness.settings, a2a=A2aSettings(hold_seconds=0.5))
    async with serve_peer(("book",)) as peer:
        spec = (
            AgentBuilder("lifecycle_later")
            .model("fake-model")
            .suspension(may_ask_questions=True)
            .a2a_peer("travel", peer.url)
            .build()
        )
        harness.fake.enqueue(
            Reply.tool_calls(ToolCall("travel__book", {"message": "later:2:which seat?"}, id="b1")),
            Reply.text("Window seat booked."),
        )
        async with harness.worker():
            run = await harness.client.dispatch(spec, "Book it", scope=harness.scope)

            def asks(state: RunState) -> bool:
                return is_waiting(state) and state.pending[0].reason == "question"

            state = await state_when(harness.client, run, harness.scope, asks, what="the question")
            [pending] = state.pending
            assert pending.id == "b1"
            assert pending.question == "A2A peer 'travel' asks (task task-1): which seat?"
            await harness.client.answer(run, pending.id, "window", scope=harness.scope)
            result = await asyncio.wait_for(harness.client.result(run, scope=harness.scope), 90)
            report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    assert peer.texts() == ["later:2:which seat?", "window"]
    assert peer.requests[1].task_id == "task-1"
    [call] = report.tool_calls
    assert call.status == "ok" and "answered: window" in (call.result or "")
    assert len(harness.fake.requests) == 2


async def test_a_durable_wait_reads_on_through_a_peer_restarting(harness: Harness) -> None:
    harness.settings = dataclasses.replace(harness.settings, a2a=A2aSettings(hold_seconds=0.5))
    async with serve_peer(("book",)) as peer:
        spec = (
            AgentBuilder("lifecycle_restarting")
            .model("fake-model")
            .a2a_peer("travel", peer.url)
            .build()
        )
        harness.fake.enqueue(
            Reply.tool_calls(ToolCall("travel__book", {"message": "slow:3"})), Reply.text("Booked.")
        )
        async with harness.worker():
            run = await harness.client.dispatch(spec, "Book it", scope=harness.scope)
            await state_when(
                harness.client, run, harness.scope, is_waiting, what="the wait on the peer task"
            )
            peer.down = True

            # More reads refused than one read's retries (3 attempts): the Run read again
            # after a failed read, rather than ending its wait with the failure.
            async def _read_again() -> bool:
                return peer.refused > 3

            await eventually(_read_again, within=60, what="a read after a failed one")
            peer.down = False
            result = await asyncio.wait_for(harness.client.result(run, scope=harness.scope), 120)
            records = (await harness.client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.COMPLETED, result.reason
    [resumed] = [r for r in records if isinstance(r, Resumed)]
    assert (resumed.id, resumed.by) == ("a2a:travel:task-1", "a2a peer travel")
    assert "done slowly" in (resumed.detail or "")
    assert peer.texts() == ["slow:3"]


async def test_a_task_the_call_cannot_read_in_its_hold_is_waited_for_durably(
    harness: Harness,
) -> None:
    # A hold longer than the test: the read fails inside it, not the durable wait's.
    harness.settings = dataclasses.replace(harness.settings, a2a=A2aSettings(hold_seconds=600))
    async with serve_peer(("book",)) as peer:
        spec = AgentBuilder("lifecycle_unread").model("fake-model").a2a_peer("travel", peer.url)
        harness.fake.enqueue(
            Reply.tool_calls(ToolCall("travel__book", {"message": "slow:3"})), Reply.text("Booked.")
        )
        async with harness.worker():
            run = await harness.client.dispatch(spec.build(), "Book it", scope=harness.scope)

            async def _sent() -> bool:
                return peer.texts() == ["slow:3"]

            await eventually(_sent, within=30, what="the message at the peer")
            peer.down = True

            async def _refused() -> bool:
                return peer.refused > 0

            await eventually(_refused, within=30, what="a read refused")
            peer.down = False
            result = await asyncio.wait_for(harness.client.result(run, scope=harness.scope), 120)
            report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    # The task was taken: a read failing in the hold is no answer. The Run waited on the
    # task and read its end, rather than telling the model the call failed.
    [call] = report.tool_calls
    assert call.status == "ok" and "done slowly" in (call.result or ""), call.result
    assert peer.texts() == ["slow:3"]
