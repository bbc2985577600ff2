"""``psych serve``'s event stream resumed from an id the Run never sent: past its last
record (another Run's id, or made up), on a waiting Run and a settled one, through a
fresh follower and one other streams share; and a malformed id.

From an audit: such a stream waited silently (on a settled Run it ended, its ``end``
naming the made-up seq as the last), though the docs promise nothing is lost. Real
uvicorn on loopback, real dev server and worker, the fake model."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall

from ._serve import ACME, read_events, served
from ._waiting import eventually, is_waiting, state_when
from .conftest import Harness

pytestmark = pytest.mark.e2e

UNKNOWN = "urn:psych:problem:unknown-event-id"


async def resumed_from(http: httpx.AsyncClient, url: str, event_id: str) -> list[Any]:
    """The events of the stream resumed from ``event_id``, to its end (bounded: a stream
    that waits silently fails here)."""
    async with asyncio.timeout(30):
        events, _ = await read_events(http, url, {**ACME, "Last-Event-ID": event_id}, "error")
    return events


def refused(events: list[Any], event_id: str, last_seq: int) -> None:
    """``events`` is one error event naming ``event_id`` and the Run's last seq."""
    assert [name for name, _, _ in events] == ["error"], events
    problem = events[0][2]
    assert problem["type"] == UNKNOWN, problem
    assert problem["status"] == 422
    assert problem["last_seq"] == last_seq
    assert repr(event_id) in problem["detail"]
    assert "without an id" in problem["detail"]


async def test_an_id_past_the_runs_records_is_refused_not_waited_on(harness: Harness) -> None:
    spec = (
        AgentBuilder("greeter", registry=harness.registry)
        .model("fake-model")
        .suspension(may_ask_questions=True)
        .build()
    )
    harness.fake.enqueue(Reply.tool_calls(ToolCall("ask_question", {"question": "Name?"}, id="q1")))
    harness.fake.enqueue(Reply.text("Hello."))
    async with harness.worker(), served(harness) as base, httpx.AsyncClient(timeout=30) as http:
        waiting = await harness.client.dispatch(spec, "greet me", scope=harness.scope)
        state = await state_when(
            harness.client, waiting, harness.scope, is_waiting, what="the question"
        )
        url = f"{base}/v1/runs/{waiting.workflow_id}/events"
        last = state.last_seq
        # A fresh follower, whose first query says how far the Run is.
        alone = await resumed_from(http, url, str(last + 40))
        # A follower another stream holds, idle since its last query: asked again.
        holder: list[Any] = []
        holding = asyncio.create_task(read_events(http, url, ACME, "never", into=holder))
        try:

            async def holds() -> bool:
                return any(data.get("kind") == "suspended" for _, _, data in holder)

            await eventually(holds, within=30, what="the other stream to read the question")
            shared = await resumed_from(http, url, f"{last + 1}/1.2#1/3")
            # An id within the Run's records resumes after it, as ever.
            valid, _ = await read_events(
                http, url, {**ACME, "Last-Event-ID": str(last - 1)}, "suspended"
            )
        finally:
            holding.cancel()
        malformed = await http.get(url, headers={**ACME, "Last-Event-ID": "7/x"})
        await harness.client.answer(waiting, "q1", "Ada", scope=harness.scope)
        await harness.client.result(waiting, scope=harness.scope)
        settled = (await harness.client.status(waiting, scope=harness.scope)).last_seq
        # Settled: its stream used to end at once, its `end` naming the made-up seq.
        after_settling = await resumed_from(http, url, str(settled + 1))

    refused(alone, str(last + 40), last)
    refused(shared, f"{last + 1}/1.2#1/3", last)
    assert [data["seq"] for name, _, data in valid if name == "record"] == [last]
    assert malformed.status_code == 422
    assert "'7/x'" in malformed.json()["detail"]
    refused(after_settling, str(settled + 1), settled)
