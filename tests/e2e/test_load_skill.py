"""``load_skill``: the body the model receives is the skill's body, and an unknown name is
a helpful message, never a failure (issue 26, item 5), read from the fake model's
recorded requests."""

from __future__ import annotations

import pytest

from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus

from .conftest import Harness

pytestmark = pytest.mark.e2e

BODY = "Refunds are allowed within 30 days of delivery, never for gift cards."


async def test_the_model_receives_the_skill_body(harness: Harness) -> None:
    spec = (
        AgentBuilder("skill-reader")
        .model("fake-model")
        .skill("refund-policy", "When a refund is allowed.", body=BODY)
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(
            ToolCall("load_skill", {"name": "refund-policy"}),
            ToolCall("load_skill", {"name": "no-such-skill"}),
        ),
        Reply.text("Within 30 days."),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "may I refund?", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED
    first, second = harness.fake.requests
    assert "refund-policy" in first["messages"][0]["content"]
    assert BODY not in first["messages"][0]["content"]
    tools = [m for m in second["messages"] if m["role"] == "tool"]
    assert tools[0]["content"] == BODY
    assert "no-such-skill" in tools[1]["content"]
    assert "refund-policy" in tools[1]["content"]
