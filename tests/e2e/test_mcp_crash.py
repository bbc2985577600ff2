"""A worker killed with SIGKILL mid MCP call; another worker finishes the Runs.

Like ``test_crash.py`` for HTTP tools, with MCP annotations deciding exactly-once: a worker
process starts two Runs against one MCP server, one calling ``charge`` (unannotated: a
write, not safe to repeat) and one calling ``tally`` (read-only), both held back by the
server. Once both calls reached it the process is SIGKILLed and a worker in the test
process takes over: ``charge`` is never sent again and is recorded UNKNOWN; ``tally`` is
sent again and its result used.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from temporalio.testing import WorkflowEnvironment

from psych_runtime.specs import AgentBuilder, Scope
from psych_runtime.testing import FakeModel, Reply, ToolCall
from psych_runtime.workflows import RunReport, RunResult, RunStatus
from psych_runtime.workflows.kernel._tool_calls import UNKNOWN_OUTCOME
from tests.mcp.fixture import McpTestServer, start_mcp_server

from ._crash import doomed_worker

pytestmark = pytest.mark.e2e

HELD_BACK = 6.0
"""Seconds the server holds each answer: the calls are in flight when the worker dies."""


@dataclass
class Crash:
    charge: tuple[RunResult, RunReport]
    tally: tuple[RunResult, RunReport]
    server: McpTestServer


@pytest.fixture(scope="module")
async def crash(
    dev_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Crash]:
    home = tmp_path_factory.mktemp("mcp-crash")
    task_queue = f"mcp-crash-{uuid.uuid4().hex[:12]}"
    scope = Scope(tenant="acme")
    server = start_mcp_server("streamable-http")

    def agent(name: str, model: str) -> AgentBuilder:
        return AgentBuilder(name).model(model).mcp_server("pay", server.url)

    try:
        async with FakeModel(models=("fake-model", "fake-other")) as fake:
            fake.enqueue(
                Reply.tool_calls(
                    ToolCall("pay__charge", {"amount": 5, "sleep_seconds": HELD_BACK})
                ),
                Reply.text("I could not confirm the charge; please check."),
                model="fake-model",
            )
            fake.enqueue(
                Reply.tool_calls(ToolCall("pay__tally", {"sleep_seconds": HELD_BACK})),
                Reply.text("Counted."),
                model="fake-other",
            )
            async with doomed_worker(dev_env.client, task_queue, home, fake.base_url) as doomed:
                client = doomed.psych
                charge = await client.dispatch(
                    agent("charger", "fake-model").build(), "Charge", scope=scope
                )
                tally = await client.dispatch(
                    agent("counter", "fake-other").build(), "Count", scope=scope
                )
                await doomed.kill_when(
                    lambda: server.calls("charge") == 1 and server.calls("tally") == 1
                )
                async with doomed.survivor():
                    results = await asyncio.wait_for(
                        asyncio.gather(
                            client.result(charge, scope=scope), client.result(tally, scope=scope)
                        ),
                        timeout=90,
                    )
                    reports = [await client.report(run, scope=scope) for run in (charge, tally)]
        yield Crash((results[0], reports[0]), (results[1], reports[1]), server)
    finally:
        server.stop()


async def test_a_write_in_flight_is_never_resent_and_recorded_unknown(crash: Crash) -> None:
    result, report = crash.charge
    assert result.status is RunStatus.COMPLETED, result.reason
    assert crash.server.calls("charge") == 1
    [call] = report.tool_calls
    assert (call.tool, call.status) == ("pay__charge", "unknown")
    assert call.result == UNKNOWN_OUTCOME


async def test_a_read_only_call_in_flight_is_run_again(crash: Crash) -> None:
    result, report = crash.tally
    assert result.status is RunStatus.COMPLETED, result.reason
    assert crash.server.calls("tally") == 2
    [call] = report.tool_calls
    assert (call.tool, call.status) == ("pay__tally", "ok")
