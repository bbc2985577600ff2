"""A workflow's tool step outputs keep the kind the tool returned (SEMANTICS, Workflows): a
JSON object or array stays structured, any other result stays its text. From an audit of
WorkflowRun: a tool's text "42" became the number 42 in the outputs and in what the next
step read."""

from __future__ import annotations

import asyncio
import json

import pytest

from psych_runtime.specs import AgentBuilder, WorkflowBuilder
from psych_runtime.testing import Reply
from psych_runtime.workflows import RunStatus, StepFinished

from .conftest import Harness

pytestmark = pytest.mark.e2e

SETTLES_WITHIN = 15
"""Seconds for the Run's result: a Run whose workflow task fails never settles."""


async def test_a_text_result_stays_text_and_a_structured_one_stays_structured(
    harness: Harness,
) -> None:
    @harness.registry.register
    def count(what: str) -> str:
        """Count something; the answer is text."""
        return {"orders": "42", "flag": "true", "none": "null", "quoted": '"hi"'}[what]

    @harness.registry.register
    def lookup(order: int) -> dict[str, object]:
        """Look an order up."""
        return {"order": order, "items": [1, 2]}

    @harness.registry.register
    def listing() -> list[str]:
        """List the open orders."""
        return ["a", "b"]

    reader = AgentBuilder("reader", registry=harness.registry).model("fake-model").build()
    spec = (
        WorkflowBuilder("counting", registry=harness.registry)
        .tool("count")
        .tool("lookup")
        .tool("listing")
        .tool_step("orders", "count", {"what": "orders"})
        .tool_step("flag", "count", {"what": "flag"})
        .tool_step("none", "count", {"what": "none"})
        .tool_step("quoted", "count", {"what": "quoted"})
        .tool_step("order", "lookup", {"order": 7})
        .tool_step("open", "listing", {})
        .agent_step("read", reader)
        .build()
    )
    harness.fake.enqueue(Reply.text("read them"))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "count", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.COMPLETED, result.reason
    expected = {
        "orders": "42",
        "flag": "true",
        "none": "null",
        "quoted": '"hi"',
        "order": {"order": 7, "items": [1, 2]},
        "open": ["a", "b"],
    }
    assert result.outputs == {**expected, "read": "read them"}
    finished = {r.step: r.output for r in records if isinstance(r, StepFinished)}
    assert finished == {**expected, "read": "read them"}
    # The agent step read the same outputs, as data (JSON keyed by step name).
    (request,) = harness.fake.requests
    said = [m["content"] for m in request["messages"] if m["role"] == "user"]
    assert json.loads(said[1].split("\n", 1)[1]) == expected


async def test_an_escaped_surrogate_half_in_a_structured_result_becomes_a_replacement(
    harness: Harness,
) -> None:
    # From an audit: a tool's JSON text escaping half a surrogate pair alone decoded into a
    # string no payload can carry, and the Run's workflow task failed again and again.
    @harness.registry.register
    def cut() -> str:
        """Return JSON text that cut an emoji in two."""
        return '{"title": "half \\ud83d", "\\udc00key": ["\\uD800", "whole \\ud83d\\ude00"]}'

    reader = AgentBuilder("reader", registry=harness.registry).model("fake-model").build()
    spec = (
        WorkflowBuilder("cut-text", registry=harness.registry)
        .tool("cut")
        .tool_step("cut", "cut", {})
        .agent_step("read", reader)
        .build()
    )
    harness.fake.enqueue(Reply.text("read it"))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        async with asyncio.timeout(SETTLES_WITHIN):
            result = await harness.client.result(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    expected = {"title": "half \ufffd", "\ufffdkey": ["\ufffd", "whole \U0001f600"]}
    assert result.outputs == {"cut": expected, "read": "read it"}
    (request,) = harness.fake.requests
    said = [m["content"] for m in request["messages"] if m["role"] == "user"]
    assert json.loads(said[1].split("\n", 1)[1]) == {"cut": expected}
