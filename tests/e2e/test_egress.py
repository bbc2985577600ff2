"""The egress policy on a real Run: a Spec's HTTP tool, and the same tool in a child the model
spawns, are refused by the worker's default policy, as a ``denied`` tool result the model
reads and a record naming the rule; the server is never reached."""

from __future__ import annotations

import dataclasses
from typing import Any

from psych_runtime.activities.egress import EgressSettings
from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import ChildSpawned, Record, RunHandle, ToolCallFinished

from ._http_server import CountingServer, refund_tool
from .conftest import Harness
from .test_spawn import last, system

LEAD = "You lead the refunds."


async def records(harness: Harness, run: RunHandle | str) -> tuple[Record, ...]:
    return (await harness.client.records(run, scope=harness.scope, limit=5000)).records


async def test_a_spec_tool_and_a_spawned_childs_tool_on_loopback_are_denied_by_default(
    harness: Harness,
) -> None:
    api = CountingServer().start()
    try:
        # The worker's default policy: the suite allows loopback (tests/conftest.py); this
        # worker does not.
        harness.settings = dataclasses.replace(
            harness.settings, egress=EgressSettings(), versions=harness.client.store
        )
        spec = (
            AgentBuilder("lead")
            .model("fake-model")
            .instructions(LEAD)
            .http_tool("refund", **refund_tool(api.url))
            .spawn(tools=["refund"])
            .build()
        )
        refund = ToolCall("refund", {"order_id": "A-1"})

        def respond(body: dict[str, Any]) -> Reply:
            message = last(body)
            if LEAD in system(body):
                if message["role"] == "user":
                    spawn = {
                        "name": "refunder",
                        "instructions": "You refund.",
                        "task": "refund A-1",
                        "tools": ["refund"],
                    }
                    return Reply.tool_calls(refund, ToolCall("spawn", spawn))
                if message["content"].startswith('{"child"'):
                    return Reply.tool_calls(ToolCall("wait_children", {}))
                if message["role"] == "tool" and message["content"].startswith("["):
                    return Reply.text("done")
                return Reply.text("waiting")
            if message["role"] == "user":  # the child
                return Reply.tool_calls(refund)
            return Reply.text(message["content"])

        harness.fake.responder = respond
        async with harness.worker():
            run = await harness.client.dispatch(spec, "refund A-1", scope=harness.scope)
            await harness.client.result(run, scope=harness.scope)
            lead = await records(harness, run)
            (spawned,) = [r for r in lead if isinstance(r, ChildSpawned)]
            child = await records(harness, spawned.run)
    finally:
        api.stop()

    refusal = (
        "refund: egress refused: 127.0.0.1: loopback addresses are refused for URLs from a "
        "Spec unless the operator allows them (egress allow list: PSYCH_EGRESS_ALLOW or the "
        "settings file)"
    )
    for log in (lead, child):
        refunds = [r for r in log if isinstance(r, ToolCallFinished) and r.tool == "refund"]
        assert [(r.status, r.content) for r in refunds] == [("denied", refusal)]
    assert api.seen == []
    # What the child's model read is the same refusal, its only tool result.
    child_calls = [b for b in harness.fake.requests if "You refund." in system(b)]
    shown = {m["content"] for b in child_calls for m in b["messages"] if m["role"] == "tool"}
    assert shown == {refusal}
