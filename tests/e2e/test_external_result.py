"""The payload that completes a code tool's external wait is the call's result arriving
late: the call's post hooks see it, and it is stored as any tool result (handle and
preview past ``large_result_bytes``). From an audit of hooks: a post hook masking card
numbers never saw a completed payload, which reached the model as sent."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from psych_runtime.activities import HookCall, Hooks, LocalBlobStore
from psych_runtime.specs import AgentBuilder, ExternalWait
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus, ToolCallFinished
from psych_runtime.workflows.kernel._external_result import UNFINISHED

from ._waiting import is_suspended, state_when
from .conftest import Harness

pytestmark = pytest.mark.e2e

CARD = "4242424242424242"
NOTE = "settled by the payment provider after review. " * 10


def request_payment(order_id: str) -> ExternalWait:
    """Ask the payment provider to charge an order; its webhook completes the call.

    Args:
        order_id: The order.
    """
    return ExternalWait(token=f"pay-{order_id}", message="waiting for the payment webhook")


def charge_43(call: HookCall) -> dict[str, Any]:
    return {**call.arguments, "order_id": "43"}


def hide_cards(call: HookCall, result: str) -> str:
    return re.sub(r"\b\d{12}(\d{4})\b", r"************\1", result)


async def test_a_completed_payload_goes_through_post_hooks_and_is_stored(
    harness: Harness,
) -> None:
    harness.registry.register(request_payment)
    hooks = Hooks().pre("request_payment", charge_43).post("*", hide_cards)
    harness.settings = dataclasses.replace(harness.settings, hooks=hooks)
    spec = (
        AgentBuilder("payer", registry=harness.registry)
        .model("fake-model")
        .tool("request_payment")
        .limits(large_result_bytes=200)
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("request_payment", {"order_id": "42"})), Reply.text("Paid.")
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "charge 42", scope=harness.scope)
        state = await state_when(
            harness.client, run, harness.scope, is_suspended, what="the Run to suspend"
        )
        assert state.pending[0].id == "pay-43"
        payload = {"paid": True, "card": CARD, "note": NOTE}
        await harness.client.complete(run, "pay-43", payload, scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.COMPLETED, result.reason
    (finished,) = [r for r in records if isinstance(r, ToolCallFinished)]
    assert finished.status == "ok"
    # Stored whole (past the bound), the card masked; the model read a preview and handle.
    assert finished.truncated and finished.result_ref is not None
    assert CARD not in finished.content and CARD not in json.dumps(harness.fake.requests)
    assert "************4242" in finished.content
    # The record keeps the waiting call's arguments and pre hook, then the post hook.
    assert finished.ran_arguments == {"order_id": "43"}
    assert [(h.stage, h.effect) for h in finished.hooks] == [
        ("pre", "rewrote_arguments"),
        ("post", "rewrote_result"),
    ]


async def test_a_small_completed_payload_without_hooks_is_shown_as_sent(
    harness: Harness,
) -> None:
    harness.registry.register(request_payment)
    spec = (
        AgentBuilder("payer", registry=harness.registry)
        .model("fake-model")
        .tool("request_payment")
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("request_payment", {"order_id": "42"})), Reply.text("Paid.")
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "charge 42", scope=harness.scope)
        await state_when(
            harness.client, run, harness.scope, is_suspended, what="the Run to suspend"
        )
        await harness.client.complete(run, "pay-42", {"paid": True}, scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.COMPLETED, result.reason
    (finished,) = [r for r in records if isinstance(r, ToolCallFinished)]
    assert (finished.status, json.loads(finished.content)) == ("ok", {"paid": True})
    assert not finished.truncated and finished.hooks == () and finished.ran_arguments is None
    tool_messages = [m for m in harness.fake.requests[1]["messages"] if m["role"] == "tool"]
    assert json.loads(tool_messages[0]["content"]) == {"paid": True}


class _FailingPuts(LocalBlobStore):
    """A blob store whose next ``failures`` puts fail, once set."""

    failures = 0

    async def put(self, data: bytes) -> str:
        if self.failures:
            self.failures -= 1
            raise OSError("the blob volume is gone")
        return await super().put(data)


async def test_a_payload_that_cannot_be_finished_is_an_error_the_model_reads(
    harness: Harness, tmp_path: Path
) -> None:
    # From a review: the activity's failure (the blob store down through its retries, or
    # a tools worker of the build before, which lacks it) failed the whole Run.
    blobs = _FailingPuts(tmp_path / "failing-blobs")
    harness.registry.register(request_payment)
    hooks = Hooks().post("*", hide_cards)
    harness.settings = dataclasses.replace(harness.settings, hooks=hooks, blobs=blobs)
    spec = (
        AgentBuilder("payer", registry=harness.registry)
        .model("fake-model")
        .tool("request_payment")
        .limits(large_result_bytes=200)
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("request_payment", {"order_id": "42"})),
        Reply.text("The payment could not be read."),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "charge 42", scope=harness.scope)
        await state_when(harness.client, run, harness.scope, is_suspended, what="the wait")
        blobs.failures = 3  # every attempt of psych.tool.finish_external (SAFE_TOOL_RETRY)
        payload = {"paid": True, "card": CARD, "note": NOTE}
        await harness.client.complete(run, "pay-42", payload, scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.COMPLETED, result.reason
    (finished,) = [r for r in records if isinstance(r, ToolCallFinished)]
    assert finished.status == "error"
    assert finished.content.startswith(UNFINISHED) and "blob volume is gone" in finished.content
    assert CARD not in json.dumps(harness.fake.requests)
