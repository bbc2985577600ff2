"""A Run waiting on an A2A peer's task may be completed by hand (``psych complete`` on its
``a2a:`` token): the payload is the call's result arriving late, so the call's post hooks
see it and it is stored as any tool result, as when the poller reads the peer's answer.
From a review: a card-masking post hook never saw a payload completed by hand."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from collections.abc import Callable

import pytest

from psych_runtime.activities import HookCall, Hooks
from psych_runtime.activities.a2a import A2aSettings
from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunState, RunStatus, ToolCallFinished
from tests.a2a.peer import serve_peer

from ._waiting import is_waiting, state_when
from .conftest import Harness

pytestmark = pytest.mark.e2e

CARD = "4242424242424242"


def hide_cards(call: HookCall, result: str) -> str:
    return re.sub(r"\b\d{12}(\d{4})\b", r"************\1", result)


async def test_a_peer_wait_completed_by_hand_goes_through_post_hooks(harness: Harness) -> None:
    hooks = Hooks().post("travel__*", hide_cards)
    harness.settings = dataclasses.replace(
        harness.settings, a2a=A2aSettings(hold_seconds=0.5), hooks=hooks
    )
    async with serve_peer(("book",)) as peer:
        spec = (
            AgentBuilder("hand_completed_booker")
            .model("fake-model")
            .a2a_peer("travel", peer.url)
            .limits(large_result_bytes=100)
            .build()
        )
        harness.fake.enqueue(
            Reply.tool_calls(ToolCall("travel__book", {"message": "slow:60"})),
            Reply.text("Booked."),
        )
        async with harness.worker():
            run = await harness.client.dispatch(spec, "Book it", scope=harness.scope)
            state = await state_when(
                harness.client, run, harness.scope, is_waiting, what="the wait on the peer task"
            )
            [pending] = state.pending
            payload = {"booked": True, "card": CARD, "note": "confirmed by phone. " * 10}
            await harness.client.complete(run, pending.id, payload, scope=harness.scope)
            result = await asyncio.wait_for(harness.client.result(run, scope=harness.scope), 90)
            records = (await harness.client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.COMPLETED, result.reason
    [finished] = [r for r in records if isinstance(r, ToolCallFinished)]
    assert finished.status == "ok"
    # The card masked before the model (or the record) saw it; stored past the bound.
    assert CARD not in finished.content and CARD not in json.dumps(harness.fake.requests)
    assert "************4242" in finished.content
    assert finished.truncated and finished.result_ref is not None
    assert [(e.stage, e.effect) for e in finished.hooks] == [("post", "rewrote_result")]


async def test_a_wait_after_a_peer_question_completed_by_hand_goes_through_post_hooks(
    harness: Harness,
) -> None:
    # The poller brings the peer's question (noting the wait as its own read); the person's
    # answer leaves the same task working, so the Run waits on the same a2a: token again.
    # Completed by hand then, the payload was taken for the poller's read: no post hook.
    hooks = Hooks().post("travel__*", hide_cards)
    harness.settings = dataclasses.replace(
        harness.settings, a2a=A2aSettings(hold_seconds=0.5), hooks=hooks
    )
    async with serve_peer(("book",)) as peer:
        spec = (
            AgentBuilder("asked_then_hand_completed")
            .model("fake-model")
            .suspension(may_ask_questions=True)
            .a2a_peer("travel", peer.url)
            .build()
        )
        harness.fake.enqueue(
            Reply.tool_calls(ToolCall("travel__book", {"message": "later:1:which card?"})),
            Reply.text("Booked."),
        )
        async with harness.worker():
            run = await harness.client.dispatch(spec, "Book it", scope=harness.scope)

            def waits_for(reason: str) -> Callable[[RunState], bool]:
                return lambda state: is_waiting(state) and state.pending[0].reason == reason

            asked = await state_when(
                harness.client, run, harness.scope, waits_for("question"), what="the question"
            )
            [question] = asked.pending
            await harness.client.answer(run, question.id, "slow:60", scope=harness.scope)
            waiting = await state_when(
                harness.client, run, harness.scope, waits_for("external"), what="the wait"
            )
            [pending] = waiting.pending
            assert pending.id == "a2a:travel:task-1"  # the token the question came under
            await harness.client.complete(run, pending.id, {"card": CARD}, scope=harness.scope)
            result = await asyncio.wait_for(harness.client.result(run, scope=harness.scope), 90)
            records = (await harness.client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.COMPLETED, result.reason
    assert peer.texts() == ["later:1:which card?", "slow:60"]
    [finished] = [r for r in records if isinstance(r, ToolCallFinished)]
    assert CARD not in finished.content and CARD not in json.dumps(harness.fake.requests)
    assert "************4242" in finished.content
    assert [(e.stage, e.effect) for e in finished.hooks] == [("post", "rewrote_result")]
