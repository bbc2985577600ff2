"""``wait_children`` in the very turn that spawns: the model's answer spawns and waits at once."""

from __future__ import annotations

import json
from typing import Any

import pytest

from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import ChildSpawned, RunStatus, ToolCallFinished

from .conftest import Harness
from .test_spawn import LEAD, last, lead_agent, of, records, spawn_call, system

pytestmark = pytest.mark.e2e


async def test_wait_children_in_the_spawning_turn_waits_for_that_turns_children(
    harness: Harness,
) -> None:
    spec = lead_agent(harness).spawn(models=["fake-model"]).build()
    # One answer spawns two children, asks for a third the envelope refuses, and waits for
    # all: the wait must find the two being started, and not wait for the refused one.
    calls = [
        spawn_call("alpha", id="s1"),
        spawn_call("beta", id="s2"),
        spawn_call("gamma", model="fake-other", id="s3"),
        ToolCall("wait_children", {}, id="wait"),
    ]

    def respond(body: dict[str, Any]) -> Reply:
        message, prompt = last(body), system(body)
        if LEAD in prompt:
            if message["role"] == "user":
                return Reply.tool_calls(*calls)
            return Reply.text("done")
        return Reply.text(f"{prompt} found x")

    harness.fake.responder = respond
    async with harness.worker():
        run = await harness.client.dispatch(spec, "find x", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        lead = await records(harness, run)

    assert result.status is RunStatus.COMPLETED
    finished = {r.call_id: r for r in of(lead, ToolCallFinished)}
    assert finished["s3"].status == "error"
    assert "outside the spawn envelope" in finished["s3"].content
    wait = finished["wait"]
    assert wait.status == "ok", wait.content
    spawned = {r.agent: r.run for r in of(lead, ChildSpawned)}
    assert json.loads(wait.content) == [
        {
            "status": "completed",
            "run": spawned["alpha"],
            "agent": "alpha",
            "answer": "You are alpha. found x",
        },
        {
            "status": "completed",
            "run": spawned["beta"],
            "agent": "beta",
            "answer": "You are beta. found x",
        },
    ]
