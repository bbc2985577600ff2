"""``load_skill``: the body the model receives is the skill's body; an unknown name, and
arguments that do not fit its schema, are errors naming what is wrong (a helpful message,
never a failure of the Run: issue 26, item 5); a body over ``large_result_bytes`` is shown
as a handle with a preview that ``read_tool_output`` reads on. Read from the fake model's
recorded requests and the Run's records."""

from __future__ import annotations

import re
from typing import Any

import pytest

from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus, ToolCallFinished

from .conftest import Harness

pytestmark = pytest.mark.e2e

BODY = "Refunds are allowed within 30 days of delivery, never for gift cards."
LONG_BODY = "".join(f"Rule {n:03d}: a refund needs the order number.\n" for n in range(100))
HANDLE = re.compile(r'handle "(sha256:[0-9a-f]{64})"')


def _skilled(body: str = BODY) -> AgentBuilder:
    return (
        AgentBuilder("skill-reader")
        .model("fake-model")
        .skill("refund-policy", "When a refund is allowed.", body=body)
        .skill("returns", "How returns are shipped.", body="Ship them back within 14 days.")
    )


async def test_the_model_receives_the_skill_body(harness: Harness) -> None:
    harness.fake.enqueue(
        Reply.tool_calls(
            ToolCall("load_skill", {"name": "refund-policy"}),
            ToolCall("load_skill", {"name": "no-such-skill"}),
        ),
        Reply.text("Within 30 days."),
    )
    async with harness.worker():
        run = await harness.client.dispatch(
            _skilled().build(), "may I refund?", scope=harness.scope
        )
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.COMPLETED
    first, second = harness.fake.requests
    assert "refund-policy" in first["messages"][0]["content"]
    assert BODY not in first["messages"][0]["content"]
    tools = [m for m in second["messages"] if m["role"] == "tool"]
    assert tools[0]["content"] == BODY
    assert tools[1]["content"] == (
        "There is no skill named 'no-such-skill'. Skills you have: refund-policy, returns."
    )
    finished = [r.status for r in records if isinstance(r, ToolCallFinished)]
    assert finished == ["ok", "error"]  # an unknown name is an error, as delegate's is


async def test_arguments_that_do_not_fit_the_schema_are_errors(harness: Harness) -> None:
    harness.fake.enqueue(
        Reply.tool_calls(
            ToolCall("load_skill", {}),
            ToolCall("load_skill", {"name": 7}),
            ToolCall("load_skill", {"name": "returns", "section": "gifts"}),
            ToolCall("load_skill", {"skill": "returns"}),
        ),
        Reply.text("I could not load them."),
    )
    spec = _skilled().limits(failure_streak_threshold=10).build()
    async with harness.worker():
        run = await harness.client.dispatch(spec, "may I refund?", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.COMPLETED
    tools = [m["content"] for m in harness.fake.requests[1]["messages"] if m["role"] == "tool"]
    takes = ". It takes one argument, name: the name of one of your skills (refund-policy, returns)"
    assert tools == [
        f"invalid arguments for load_skill: name is missing{takes}",
        f"invalid arguments for load_skill: name must be text, not 7{takes}",
        f"invalid arguments for load_skill: 'section' is not an argument of load_skill{takes}",
        "invalid arguments for load_skill: name is missing; 'skill' is not an argument of "
        f"load_skill{takes}",
    ]
    finished = [r for r in records if isinstance(r, ToolCallFinished)]
    assert [r.status for r in finished] == ["error"] * 4


async def test_a_long_body_is_stored_and_read_back(harness: Harness) -> None:
    shown: list[str] = []

    def respond(body: dict[str, Any]) -> Reply:
        tool = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if not tool:
            return Reply.tool_calls(ToolCall("load_skill", {"name": "refund-policy"}))
        shown.append(tool[-1])
        handle = HANDLE.search(tool[-1])
        if len(tool) == 1 and handle is not None:
            arguments = {"handle": handle.group(1), "offset": 0, "length": 65536}
            return Reply.tool_calls(ToolCall("read_tool_output", arguments))
        return Reply.text("done")

    harness.fake.responder = respond
    spec = _skilled(LONG_BODY).limits(large_result_bytes=1000).build()
    async with harness.worker():
        run = await harness.client.dispatch(spec, "may I refund?", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.COMPLETED
    assert len(shown) == 2, shown
    assert len(shown[0]) < 2000 and "too large to show whole" in shown[0], shown[0][:200]
    assert shown[0].endswith(LONG_BODY[:1000])
    assert LONG_BODY in shown[1]  # its own handle: read back whole
    (loaded,) = [r for r in records if isinstance(r, ToolCallFinished) and r.tool == "load_skill"]
    assert loaded.status == "ok" and loaded.truncated
    assert loaded.size == len(LONG_BODY.encode())
