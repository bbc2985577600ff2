"""A psych agent calling a psych agent served over A2A by ``psych serve``: the caller's
peer is the served agent's card URL, its credential the serve API key of its tenant; one
worker runs both Runs on loopback (the caller's and the one the served task dispatches)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from psych_runtime.activities.secrets import StaticSecretResolver
from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus

from ._serve import served
from ._waiting import eventually
from .conftest import Harness

pytestmark = pytest.mark.e2e


async def test_a_psych_agent_calls_a_psych_agent_served_over_a2a(harness: Harness) -> None:
    # The served helper takes ~7 s (a slow code tool), past the caller's 5 s hold: the
    # caller's Run waits on the peer task durably and reads it on its timer.
    @harness.registry.register
    async def slow_lookup(city: str) -> str:
        """Look a city up, slowly."""
        await asyncio.sleep(7)
        return f"{city} is the capital of France"

    harness.client.publish(
        # Named apart from test_a2a_serve.py's "helper": both list their agent's Runs of the
        # same tenant on the session's one dev server.
        AgentBuilder("concierge", registry=harness.registry)
        .description("Knows capitals.")
        .model("fake-other")
        .tool("slow_lookup")
        .build()
    )
    harness.settings = dataclasses.replace(
        harness.settings, secrets=StaticSecretResolver({"desk-key": "acme-key-e2e"})
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("slow_lookup", {"city": "Paris"})),
        Reply.text("Paris is the capital of France."),
        model="fake-other",
    )
    harness.fake.enqueue(
        Reply.tool_calls(
            ToolCall("desk__concierge", {"message": "What is the capital of France?"})
        ),
        Reply.text("It is Paris."),
        model="fake-model",
    )
    async with harness.worker(), served(harness) as base:
        caller = (
            AgentBuilder("caller")
            .model("fake-model")
            .a2a_peer("desk", f"{base}/a2a/concierge", credential="desk-key")
            .build()
        )
        run = await harness.client.dispatch(caller, "Ask the desk", scope=harness.scope)
        result = await asyncio.wait_for(harness.client.result(run, scope=harness.scope), 90)
        report = await harness.client.report(run, scope=harness.scope)

        async def helper_completed() -> bool:
            runs = await harness.client.list(scope=harness.scope, agent="concierge")
            return [r.status for r in runs] == [RunStatus.COMPLETED]

        # The served task was a Run of the helper in the caller's tenant (its API key's).
        # Listing reads Temporal's visibility store, which lags on a loaded machine.
        await eventually(
            helper_completed, within=60, what="the helper's Run to be listed, completed"
        )
    assert result.status is RunStatus.COMPLETED, result.reason
    assert result.answer == "It is Paris."
    [call] = report.tool_calls
    assert call.status == "ok", call.result
    assert "Paris is the capital of France." in (call.result or "")
    assert "state completed" in (call.result or "")
    # The caller offered the helper's card skill, and nothing else of it.
    names = sorted(t["function"]["name"] for t in harness.fake.requests[0].get("tools", []))
    assert "desk__concierge" in names
