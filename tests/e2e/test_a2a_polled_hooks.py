"""An A2A peer's answer read later by the Run's poller (``psych.a2a.poll``) is recorded as
the answer of a call read at once is: a task that failed is an ``error`` the on_error hooks
did not replace, and what the post or on_error hooks did is kept on the call's record.

Before, the poller's answer was recorded ``ok`` whatever it was (a failed task, counted as
no failure of the tool) and with none of the hooks' effects.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from psych_runtime.activities import HookCall, Hooks
from psych_runtime.activities.a2a import A2aSettings
from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus, ToolCallFinished
from tests.a2a.peer import serve_peer

from .conftest import Harness

pytestmark = pytest.mark.e2e


def noted(call: HookCall, result: str) -> str:
    """A post hook: the result, noted."""
    return f"{result} (noted)"


def let_stand(call: HookCall, error: str) -> None:
    """An on_error hook that replaces nothing."""
    return None


def replaced(call: HookCall, error: str) -> str:
    """An on_error hook that replaces the failure."""
    return "booked by phone instead"


@pytest.mark.parametrize(
    ("message", "hooks", "status", "effects", "content"),
    [
        ("slowfail:2", Hooks().on_error("travel__book", let_stand), "error", [], "cannot do that"),
        (
            "slowfail:2",
            Hooks().on_error("travel__book", replaced),
            "ok",
            [("on_error", "replaced_error")],
            "booked by phone instead",
        ),
        (
            "slow:2",
            Hooks().post("travel__book", noted),
            "ok",
            [("post", "rewrote_result")],
            "done slowly (noted)",
        ),
    ],
    ids=["failed-task-stands", "failed-task-replaced", "result-rewritten"],
)
async def test_a_polled_peer_answer_keeps_its_status_and_hook_effects(
    harness: Harness,
    message: str,
    hooks: Hooks,
    status: str,
    effects: list[tuple[str, str]],
    content: str,
) -> None:
    harness.settings = dataclasses.replace(
        harness.settings, a2a=A2aSettings(hold_seconds=0), hooks=hooks
    )
    async with serve_peer(("book",)) as peer:
        spec = AgentBuilder("waited").model("fake-model").a2a_peer("travel", peer.url).build()
        harness.fake.enqueue(
            Reply.tool_calls(ToolCall("travel__book", {"message": message})), Reply.text("ok")
        )
        async with harness.worker():
            run = await harness.client.dispatch(spec, "Book it", scope=harness.scope)
            result = await asyncio.wait_for(harness.client.result(run, scope=harness.scope), 90)
            records = (await harness.client.records(run, scope=harness.scope)).records
            report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    assert peer.texts() == [message]
    # Read by the poller, not at once: the call waited on the peer's task.
    assert report.suspensions and report.suspensions[0].outcome == "completed"
    (finished,) = [r for r in records if isinstance(r, ToolCallFinished)]
    assert finished.status == status
    assert content in finished.content
    assert [(e.stage, e.effect) for e in finished.hooks] == effects
    (call,) = report.tool_calls
    assert call.status == status
    assert [(e.stage, e.effect) for e in call.hooks] == effects
