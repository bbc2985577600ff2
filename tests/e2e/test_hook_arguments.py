"""What a tool-call hook does to a call's arguments, and what the records say about it, on
a real dev server with psych's own worker and the fake model."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from psych_runtime.activities import Deny, HookCall, Hooks
from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus, ToolCallFinished

from .conftest import Harness

pytestmark = pytest.mark.e2e

sent_notes: list[dict[str, Any]] = []


def notify(recipient: dict[str, str], text: str) -> str:
    """Send a note to someone.

    Args:
        recipient: Who gets it ({"email": ...}).
        text: What it says.
    """
    sent_notes.append({"recipient": recipient, "text": text})
    return f"sent to {recipient['email']}"


async def test_a_pre_hook_rewriting_nested_arguments_is_recorded(harness: Harness) -> None:
    """A pre hook copies the arguments the usual way (``dict(...)``, a shallow copy) and
    changes a nested value: the tool runs with the new value and the records say so
    (``ran_arguments``, ``rewrote_arguments``). Before, the hook's change reached the tool
    through the shared nested dict while the records said no hook had touched the call."""
    seen_by_post: list[dict[str, Any]] = []

    def to_ops(call: HookCall) -> dict[str, Any]:
        arguments = dict(call.arguments)
        arguments["recipient"]["email"] = "ops@acme.com"
        return arguments

    def audit(call: HookCall, result: str) -> None:
        seen_by_post.append(json.loads(json.dumps(call.arguments)))
        call.arguments["recipient"]["email"] = "nobody@acme.com"  # in place: changes nothing

    sent_notes.clear()
    harness.registry.register(notify)
    harness.settings = dataclasses.replace(
        harness.settings, hooks=Hooks().pre("notify", to_ops).post("notify", audit)
    )
    model_arguments = {"recipient": {"email": "mallory@evil.example"}, "text": "hi"}
    harness.fake.enqueue(Reply.tool_calls(ToolCall("notify", model_arguments)), Reply.text("done"))
    spec = AgentBuilder("notifier", registry=harness.registry).model("fake-model").tool("notify")
    async with harness.worker():
        run = await harness.client.dispatch(spec.build(), "tell them", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
        report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason

    ran = {"recipient": {"email": "ops@acme.com"}, "text": "hi"}
    assert sent_notes == [ran]
    assert seen_by_post == [ran]
    (finished,) = [r for r in records if isinstance(r, ToolCallFinished)]
    assert finished.ran_arguments == ran
    assert [(h.stage, h.effect) for h in finished.hooks] == [("pre", "rewrote_arguments")]
    (call,) = report.tool_calls
    assert json.loads(call.arguments) == model_arguments
    assert call.ran_arguments == ran


async def test_a_deny_without_a_text_reason_is_the_hooks_failure(harness: Harness) -> None:
    """A pre hook answering ``Deny(None)`` (a reason looked up and not found, say) denies
    as a failed hook does, naming what is wrong; it was a pydantic error about
    ``HookEffect`` failing the tool's activity."""

    def refuse(call: HookCall) -> Deny:
        return Deny({"blocked": "mallory@evil.example"}.get("ops@acme.com"))  # type: ignore[arg-type]  # the mistake under test

    sent_notes.clear()
    harness.registry.register(notify)
    harness.settings = dataclasses.replace(harness.settings, hooks=Hooks().pre("notify", refuse))
    arguments = {"recipient": {"email": "ops@acme.com"}, "text": "hi"}
    harness.fake.enqueue(Reply.tool_calls(ToolCall("notify", arguments)), Reply.text("done"))
    spec = AgentBuilder("denier", registry=harness.registry).model("fake-model").tool("notify")
    async with harness.worker():
        run = await harness.client.dispatch(spec.build(), "tell them", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    assert sent_notes == []
    (call,) = report.tool_calls
    assert call.status == "denied", call.result
    reason = "the hook failed: TypeError: a Deny's reason is a str, not None"
    assert reason in (call.result or "")
    assert [(h.stage, h.effect, h.detail) for h in call.hooks] == [("pre", "denied", reason)]
    assert reason in harness.fake.requests[1]["messages"][-1]["content"]
