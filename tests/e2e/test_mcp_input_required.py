"""An MCP server of the 2026-07-28 protocol asking for input (``input_required``) in a real
Run on the dev server: the Run suspends on a question, a person answers through the normal
answer paths (the client's, and `psych serve`'s HTTP route), and the answer reaches the
server in the retried call; a Spec that may not ask gets the server's question as the
call's error instead."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from psych_runtime.specs import AgentBuilder, AgentSpec
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import Resumed, RunStatus, Suspended
from tests.mcp.modern_fixture import ModernMcpServer, start_modern_server

from ._serve import ACME, served
from ._waiting import is_waiting, state_when
from .conftest import Harness

pytestmark = pytest.mark.e2e


@pytest.fixture
def modern() -> Iterator[ModernMcpServer]:
    server = start_modern_server()
    yield server
    server.stop()


def shop_agent(server: ModernMcpServer, *, may_ask: bool) -> AgentSpec:
    return (
        AgentBuilder("mcp-input-shopper")
        .instructions("Order what you are asked to.")
        .model("fake-model")
        .mcp_server("shop", server.url)
        .suspension(may_ask_questions=may_ask)
        .build()
    )


@pytest.mark.parametrize("path", ["client", "http"])
async def test_input_required_is_a_question_whose_answer_reaches_the_server(
    harness: Harness, modern: ModernMcpServer, path: str
) -> None:
    # Answered as a person would: through PsychClient.answer (what `psych answer` calls),
    # or through `psych serve`'s answer route (what the console calls).
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("shop__order", {"item": "tea"}, id="c-order")),
        Reply.text("Ordered."),
    )
    async with harness.worker():
        spec = shop_agent(modern, may_ask=True)
        run = await harness.client.dispatch(spec, "Order tea", scope=harness.scope)
        state = await state_when(
            harness.client, run, harness.scope, is_waiting, what="the server's question"
        )
        (item,) = state.pending
        assert (item.reason, item.id, item.tool) == ("question", "c-order", "shop__order")
        assert "How many tea should I order?" in (item.question or "")
        assert modern.state()["orders"] == []
        if path == "client":
            await harness.client.answer(run, "c-order", "3", scope=harness.scope)
        else:
            async with served(harness) as base, httpx.AsyncClient() as http:
                response = await http.post(
                    f"{base}/v1/runs/{run.workflow_id}/answer",
                    json={"call_id": "c-order", "text": "3"},
                    headers=ACME,
                )
            assert response.status_code == 200, response.text
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.COMPLETED, result.reason
    (order,) = report.tool_calls
    assert (order.status, order.result) == ("ok", "ordered 3 x tea")
    resumed = [(r.reason, r.id, r.outcome) for r in records if isinstance(r, Resumed)]
    assert resumed == [("question", "c-order", "answered")]
    seen = modern.state()
    assert seen["orders"] == [{"item": "tea", "quantity": 3}]
    assert seen["calls"] == {"order": 2}
    assert seen["responses"][-1]["responses"]["quantity"]["content"] == {"quantity": 3}
    assert harness.fake.requests[1]["messages"][-1]["content"] == "ordered 3 x tea"


async def test_a_run_that_may_not_ask_gives_the_model_the_question_as_an_error(
    harness: Harness, modern: ModernMcpServer
) -> None:
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("shop__order", {"item": "tea"}, id="c-order")),
        Reply.text("I need a quantity."),
    )
    async with harness.worker():
        spec = shop_agent(modern, may_ask=False)
        run = await harness.client.dispatch(spec, "Order tea", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.COMPLETED, result.reason
    assert not [r for r in records if isinstance(r, Suspended)]
    (order,) = report.tool_calls
    assert order.status == "error"
    assert "may_ask_questions is false" in (order.result or "")
    assert "How many tea should I order?" in (order.result or "")
    state = modern.state()
    assert state["orders"] == [] and state["calls"] == {"order": 1}


async def test_a_blank_answer_to_a_servers_question_is_taken(
    harness: Harness, modern: ModernMcpServer
) -> None:
    # Only the model's own questions (ask_question) refuse a blank answer: a server's form
    # may have a field a blank answer leaves empty, which is the server's to judge.
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("shop__order", {"item": "tea"}, id="c-order")),
        Reply.text("It did not take it."),
    )
    async with harness.worker():
        spec = shop_agent(modern, may_ask=True)
        run = await harness.client.dispatch(spec, "Order tea", scope=harness.scope)
        await state_when(harness.client, run, harness.scope, is_waiting, what="the question")
        await harness.client.answer(run, "c-order", " ", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.COMPLETED, result.reason
    resumed = [(r.reason, r.id, r.outcome) for r in records if isinstance(r, Resumed)]
    assert resumed == [("question", "c-order", "answered")]
