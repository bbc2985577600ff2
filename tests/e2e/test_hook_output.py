"""Hooks that misbehave at scale, on a real dev server with psych's own worker and the fake
model: a hook effect's detail (a command hook's stderr, the failure an on_error hook
replaced) reaches the records bounded (unbounded, a large one failed the call: "Complete
result exceeds size limit"), and sync hooks stuck past their deadline leave sync code
tools running."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
import threading

import pytest

from psych_runtime.activities import CommandHook, HookCall, Hooks
from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus
from tests._upstream import Answer, Upstream

from .conftest import Harness

pytestmark = pytest.mark.e2e

CALLED: list[str] = []


def lookup(id: str) -> str:
    """Look a record up.

    Args:
        id: The record's id.
    """
    CALLED.append(id)
    return f"record {id}"


async def test_a_pre_hook_failing_with_a_flood_on_stderr_denies(harness: Harness) -> None:
    flood = "import sys; sys.stderr.write('no: ' + 'x' * 3_000_000 + ' END'); sys.exit(3)"
    CALLED.clear()
    harness.registry.register(lookup)
    hook = CommandHook.of([sys.executable, "-c", flood])
    harness.settings = dataclasses.replace(harness.settings, hooks=Hooks().pre("lookup", hook))
    harness.fake.enqueue(Reply.tool_calls(ToolCall("lookup", {"id": "7"})), Reply.text("done"))
    spec = AgentBuilder("flooded", registry=harness.registry).model("fake-model").tool("lookup")
    async with harness.worker():
        run = await harness.client.dispatch(spec.build(), "look", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    assert CALLED == []
    (call,) = report.tool_calls
    assert call.status == "denied", call.result
    (effect,) = call.hooks
    assert effect.effect == "denied" and effect.detail.startswith("no: xxx")
    assert len(effect.detail) < 10_000 and effect.detail.endswith("xx END")


async def test_an_on_error_hook_replacing_a_huge_error_page(harness: Harness) -> None:
    """The failure an on_error hook replaced is kept in its record, bounded: a 3 MB error
    page failed the call ("Complete result exceeds size limit") after the hook ran."""
    page = "upstream exploded: " + "y" * 3_000_000 + " END"
    harness.settings = dataclasses.replace(
        harness.settings,
        hooks=Hooks().on_error("fetch", lambda call, error: "cached answer"),
    )
    with Upstream(lambda request: Answer(500, page, "text/plain")) as api:
        spec = (
            AgentBuilder("paged")
            .model("fake-model")
            .http_tool("fetch", description="Fetch it.", url=api.url + "/it", method="GET")
            .build()
        )
        harness.fake.enqueue(Reply.tool_calls(ToolCall("fetch", {})), Reply.text("done"))
        async with harness.worker():
            run = await harness.client.dispatch(spec, "fetch", scope=harness.scope)
            result = await harness.client.result(run, scope=harness.scope)
            report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    (call,) = report.tool_calls
    assert (call.status, call.result) == ("ok", "cached answer")
    (effect,) = call.hooks
    assert effect.effect == "replaced_error"
    assert effect.detail.startswith("HTTP 500 Internal Server Error: upstream exploded: yyy")
    assert effect.detail.endswith("yy END") and len(effect.detail) < 10_000
    assert "characters cut" in effect.detail


def slow_check(order_id: str) -> str:
    """Check an order (its pre hook hangs).

    Args:
        order_id: The order.
    """
    return f"checked {order_id}"


async def test_sync_hooks_stuck_past_their_deadline_leave_code_tools_running(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sync pre hook that never returns (a network call without a timeout) is denied at
    its deadline, but its thread cannot be stopped. Those threads were the event loop's
    shared ones, which sync code tools (and the stores) run on too: once as many hooks
    were stuck as that pool has threads, every sync code tool of the worker waited behind
    them. Sync hooks have threads of their own now."""
    from psych_runtime.activities.hooks import _hooks

    monkeypatch.setattr(_hooks, "PYTHON_HOOK_SECONDS", 0.2)
    shared_threads = min(32, (os.cpu_count() or 1) + 4)  # asyncio's default executor
    release = threading.Event()

    def hang(call: HookCall) -> None:
        release.wait()

    CALLED.clear()
    harness.registry.register(lookup)
    harness.registry.register(slow_check)
    harness.settings = dataclasses.replace(harness.settings, hooks=Hooks().pre("slow_check", hang))
    stuck = [ToolCall("slow_check", {"order_id": str(n)}) for n in range(shared_threads)]
    harness.fake.enqueue(
        Reply.tool_calls(*stuck),
        Reply.tool_calls(ToolCall("lookup", {"id": "7"})),
        Reply.text("done"),
    )
    spec = (
        AgentBuilder("stuck", registry=harness.registry)
        .model("fake-model")
        .tool("slow_check")
        .tool("lookup")
        .limits(max_tool_calls_per_turn=shared_threads)
        .build()
    )
    try:
        async with harness.worker():
            run = await harness.client.dispatch(spec, "check", scope=harness.scope)
            result = await asyncio.wait_for(harness.client.result(run, scope=harness.scope), 60)
            report = await harness.client.report(run, scope=harness.scope)
    finally:
        release.set()
    assert result.status is RunStatus.COMPLETED, result.reason
    assert [c.status for c in report.tool_calls] == ["denied"] * shared_threads + ["ok"]
    assert CALLED == ["7"]
    assert report.tool_calls[-1].result == "record 7"
