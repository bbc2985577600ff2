"""Abort and steer with nothing but the ``temporal`` CLI (docs/guides/temporal-cli.md,
"Abort and steer with the plain temporal CLI"), as an update and as a signal, against the
session dev server (issue 26, item 5).

The command lines are the guide's, with the workflow id of the test's Run.
"""

from __future__ import annotations

import asyncio
import shlex
from pathlib import Path
from typing import Any

import pytest

from psych_runtime.activities.tools import RulePolicy
from psych_runtime.specs import AgentBuilder, AgentSpec
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import (
    AbortRequested,
    RunHandle,
    RunStatus,
    SteerReceived,
    ToolCallFinished,
)

from .conftest import Harness
from .test_suspensions import suspended
from .test_temporal_cli_approval import temporal

pytestmark = pytest.mark.e2e

ABORT_INPUT = '{"tenant":"acme","by":"ops","reason":"the customer called back"}'
STEER_INPUT = '{"tenant":"acme","message":"Answer in French.","mode":"steer","by":"ops"}'
GUIDE = Path(__file__).parents[2] / "docs" / "guides" / "temporal-cli.md"


def waiting_agent(harness: Harness, deleted: list[str]) -> AgentSpec:
    """An agent whose one tool waits for an approval (its name is this module's own)."""

    @harness.registry.register(destructive=True)
    def delete_order(order_id: str) -> str:
        """Delete an order for good."""
        deleted.append(order_id)
        return f"order {order_id} deleted"

    harness.settings.policy = RulePolicy(destructive="ask")
    builder = AgentBuilder("cli-aborted", registry=harness.registry).model("fake-model")
    return builder.tool("delete_order").build()


def command(form: str, workflow_id: str, name: str, payload: str) -> tuple[str, ...]:
    """The guide's command line: ``update execute`` (waits, exits 1 when refused) or
    ``signal`` (fire and forget)."""
    verb = ("update", "execute") if form == "update" else ("signal",)
    return ("workflow", *verb, "--workflow-id", workflow_id, "--name", name, "--input", payload)


def accepted(form: str, name: str, out: str) -> bool:
    """Whether ``out`` is what the CLI prints when the update or signal was taken (an
    update's result is None: the Run's record says what it did)."""
    if form == "signal":
        return out == "Signal workflow succeeded\n"
    lines = [line.split() for line in out.splitlines()]
    return (
        lines[0] == ["Name", name]
        and lines[1][0] == "UpdateID"
        and lines[2]
        == [
            "Result",
            "<nil>",
        ]
    )


@pytest.mark.parametrize("form", ["update", "signal"])
@pytest.mark.parametrize(
    ("name", "payload"), [("psych.abort", ABORT_INPUT), ("psych.steer", STEER_INPUT)]
)
def test_the_guide_shows_these_command_lines(form: str, name: str, payload: str) -> None:
    # Joined where the guide breaks a line with a backslash.
    guide = GUIDE.read_text().replace(" \\\n    ", " ")
    line = shlex.join(("temporal", *command(form, "psych-acme-r1", name, payload)))
    assert line in guide.splitlines()


@pytest.mark.parametrize("form", ["update", "signal"])
async def test_abort_ends_a_suspended_run_aborted(harness: Harness, form: str) -> None:
    deleted: list[str] = []
    spec = waiting_agent(harness, deleted)
    harness.fake.enqueue(Reply.tool_calls(ToolCall("delete_order", {"order_id": "42"})))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "delete 42", scope=harness.scope)
        (pending,) = (await suspended(harness, run)).pending
        done = await temporal(harness, *command(form, run.workflow_id, "psych.abort", ABORT_INPUT))
        assert done.code == 0, done.err
        assert accepted(form, "psych.abort", done.out), done.out
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records

    assert result.status is RunStatus.ABORTED
    assert result.reason == "aborted by ops: the customer called back"
    aborts = [(r.by, r.reason) for r in records if isinstance(r, AbortRequested)]
    assert aborts == [("ops", "the customer called back")]
    finished = [(r.call_id, r.status) for r in records if isinstance(r, ToolCallFinished)]
    assert finished == [(pending.id, "aborted")]
    assert deleted == []
    assert len(harness.fake.requests) == 1


async def test_abort_update_from_another_tenant_is_refused(harness: Harness) -> None:
    deleted: list[str] = []
    spec = waiting_agent(harness, deleted)
    harness.fake.enqueue(Reply.tool_calls(ToolCall("delete_order", {"order_id": "9"})))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "delete 9", scope=harness.scope)
        await suspended(harness, run)
        foreign = ABORT_INPUT.replace('"acme"', '"globex"')
        refused = await temporal(
            harness, *command("update", run.workflow_id, "psych.abort", foreign)
        )
        state = await harness.client.status(run, scope=harness.scope)
        await harness.client.abort(run, scope=harness.scope, reason="test over")
        await harness.client.result(run, scope=harness.scope)
    assert (refused.code, refused.out, refused.err) == (
        1,
        "",
        "Error: unable to update workflow: tenant 'globex' may not act on this Run "
        "(type: AccessDenied, retryable: false)\n",
    )
    assert state.status is RunStatus.SUSPENDED


def gated_tool(harness: Harness) -> tuple[asyncio.Event, asyncio.Event]:
    """Register ``steer_lookup``: it sets the first event when it starts and answers once
    the second is set, so a steer arrives while the turn's tool call runs."""
    running, release = asyncio.Event(), asyncio.Event()

    @harness.registry.register
    async def steer_lookup(order_id: str) -> str:
        """Look an order up."""
        running.set()
        await release.wait()
        return f"order {order_id} is delivered"

    return running, release


@pytest.mark.parametrize("form", ["update", "signal"])
async def test_steer_reaches_the_next_model_call_of_the_turn(harness: Harness, form: str) -> None:
    running, release = gated_tool(harness)
    spec = (
        AgentBuilder("cli-steered", registry=harness.registry)
        .model("fake-model")
        .tool("steer_lookup")
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("steer_lookup", {"order_id": "42"}, id="look")),
        Reply.text("La commande 42 est livrée."),
    )
    async with harness.worker():
        run: RunHandle = await harness.client.dispatch(spec, "where is 42?", scope=harness.scope)
        async with asyncio.timeout(30):
            await running.wait()
        done = await temporal(harness, *command(form, run.workflow_id, "psych.steer", STEER_INPUT))
        assert done.code == 0, done.err
        assert accepted(form, "psych.steer", done.out), done.out
        if form == "signal":  # fire and forget: the steer is in once its record is
            await _steer_recorded(harness, run)
        release.set()
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records

    assert result.status is RunStatus.COMPLETED
    steers = [(r.mode, r.message, r.by) for r in records if isinstance(r, SteerReceived)]
    assert steers == [("steer", "Answer in French.", "ops")]
    _, second = harness.fake.requests
    tail: list[dict[str, Any]] = second["messages"][-2:]
    assert [(m["role"], m.get("tool_call_id")) for m in tail] == [("tool", "look"), ("user", None)]
    assert tail[0]["content"] == "order 42 is delivered"
    assert tail[1]["content"] == "Answer in French."


async def _steer_recorded(harness: Harness, run: RunHandle) -> None:
    async with asyncio.timeout(30):
        while True:
            page = await harness.client.records(run, scope=harness.scope)
            if any(isinstance(r, SteerReceived) for r in page.records):
                return
            await asyncio.sleep(0.05)
