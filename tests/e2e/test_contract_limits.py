"""What a hostile or careless caller sends to a Run is refused cleanly (issue: hardening).

A start with no argument or with two fails the Run at once (not its workflow task forever);
a resume or steer carrying megabytes is refused by the validator before anything is written,
for any caller, and the Run keeps answering queries and approvals; refusals are typed and
marked non-retryable for every Temporal client.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    RPCTimeoutOrCancelledError,
    WorkflowFailureError,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from psych_runtime.activities.contract import ErrorType
from psych_runtime.activities.tools import RulePolicy
from psych_runtime.specs import AgentBuilder, AgentSpec, Refused, Version, parse_spec, version_hash
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import (
    AGENT_RUN,
    RESUME,
    STEER,
    WORKFLOW_RUN,
    AgentRunInput,
    ResumeInput,
    RunHandle,
    RunState,
    RunStatus,
    SteerInput,
)

from ._waiting import state_when
from .conftest import Harness

pytestmark = pytest.mark.e2e

MEGABYTE = 1024 * 1024
"""Far over psych's bounds, under Temporal's 2 MB blob limit (past that, see below)."""


async def pending(harness: Harness, run: RunHandle) -> RunState:
    """The Run's state once something is pending."""
    return await state_when(
        harness.client,
        run,
        harness.scope,
        lambda state: bool(state.pending),
        what="something pending",
        within=20,
    )


def orders_agent(harness: Harness, deleted: list[str], *, order_id: str, call_id: str) -> AgentSpec:
    """An agent whose model deletes ``order_id`` (call ``call_id``), then says "ok"; the
    worker's Policy asks before every deletion, and each one done is added to ``deleted``."""

    @harness.registry.register(destructive=True)
    def delete_order(order_id: str) -> str:
        """Delete an order."""
        deleted.append(order_id)
        return "deleted"

    harness.settings.policy = RulePolicy(destructive="ask")
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("delete_order", {"order_id": order_id}, id=call_id)),
        Reply.text("ok"),
    )
    builder = AgentBuilder("orders", registry=harness.registry).model("fake-model")
    return builder.tool("delete_order").build()


@pytest.mark.parametrize("workflow", [AGENT_RUN, WORKFLOW_RUN])
@pytest.mark.parametrize("args", [[], [{"run_id": "a"}, {"run_id": "b"}]], ids=["none", "two"])
async def test_a_start_with_no_or_two_arguments_fails_the_run_at_once(
    harness: Harness, workflow: str, args: list[object]
) -> None:
    async with harness.worker():
        handle = await harness.env.client.start_workflow(
            workflow,
            args=args,
            id=f"psych-acme-args{len(args)}{workflow}",
            task_queue=harness.settings.task_queue,
        )
        async with asyncio.timeout(20):
            with pytest.raises(WorkflowFailureError) as failed:
                await handle.result()
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == ErrorType.BAD_INPUT
    given = "none" if not args else "2"
    assert f"takes one argument, an {workflow}Input (JSON); it was given {given}" in str(cause)


async def test_megabyte_updates_are_refused_before_anything_is_written(harness: Harness) -> None:
    deleted: list[str] = []
    spec = orders_agent(harness, deleted, order_id="1", call_id="c1")
    async with harness.worker():
        run = await harness.client.dispatch(spec, "delete 1", scope=harness.scope)
        handle = harness.env.client.get_workflow_handle(run.workflow_id)

        await pending(harness, run)
        events_before = len((await handle.fetch_history()).events)
        huge = "x" * MEGABYTE
        for tenant in ("acme", "globex"):  # the owner and a stranger alike
            big = ResumeInput(reason="approval", id="c1", tenant=tenant, approved=False, note=huge)
            with pytest.raises(WorkflowUpdateFailedError) as refused:
                await handle.execute_update(RESUME, big)
            cause = refused.value.cause
            assert isinstance(cause, ApplicationError)
            assert cause.non_retryable
            assert cause.type == ("TooLarge" if tenant == "acme" else "AccessDenied")
        with pytest.raises(Refused) as steer:
            await harness.client.steer(run, huge, scope=harness.scope)
        assert steer.value.kind == "TooLarge"
        # Signals with the same payloads are dropped by the Run, not taken.
        await handle.signal(STEER, SteerInput(tenant="acme", message=huge))
        # The Run answers at once, wrote nothing for the refusals, and still takes approvals.
        started = time.monotonic()
        state = await harness.client.status(run, scope=harness.scope)
        assert time.monotonic() - started < 2.0
        assert state.status is RunStatus.SUSPENDED
        history = await handle.fetch_history()
        kinds = {EventType.Name(event.event_type) for event in history.events[events_before:]}
        assert kinds, "the steer signal is in history"  # so the names are really read
        assert not any("UPDATE" in kind for kind in kinds), kinds
        await harness.client.approve(run, "c1", scope=harness.scope, note="fine")
        result = await harness.client.result(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED
    assert deleted == ["1"]


async def test_over_temporals_blob_limit_the_client_refuses_and_the_run_recovers(
    harness: Harness,
) -> None:
    # Over Temporal's 2 MB blob limit no worker can reject an update cleanly: the rejection
    # echoes the request, which the worker may not upload. PsychClient refuses such input
    # before sending it; a raw client's update fails the Run's task until the server drops
    # the update, and then the Run goes on as before, nothing written.
    deleted: list[str] = []
    spec = orders_agent(harness, deleted, order_id="2", call_id="c2")
    huge = "x" * (3 * MEGABYTE)
    async with harness.worker():
        run = await harness.client.dispatch(spec, "delete 2", scope=harness.scope)
        await pending(harness, run)
        with pytest.raises(Refused) as local:
            await harness.client.deny(run, "c2", scope=harness.scope, note=huge)
        assert local.value.kind == "TooLarge"
        handle = harness.env.client.get_workflow_handle(run.workflow_id)
        raw = ResumeInput(reason="approval", id="c2", tenant="acme", approved=False, note=huge)
        # Refused by the server once it drops the update, or given up by the client when
        # its long poll's deadline passes first (a slow machine): the update never lands.
        with pytest.raises((WorkflowUpdateFailedError, RPCError, RPCTimeoutOrCancelledError)):
            await handle.execute_update(RESUME, raw)
        started = time.monotonic()
        async with asyncio.timeout(60):
            while True:
                try:
                    await harness.client.approve(run, "c2", scope=harness.scope)
                    break
                except (RPCError, WorkflowUpdateFailedError, Refused):
                    await asyncio.sleep(0.5)
        recovered = time.monotonic() - started
        result = await harness.client.result(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED
    assert deleted == ["2"]
    assert recovered < 30.0, f"the Run took {recovered:.1f} s to take approvals again"


async def test_an_unpublished_version_with_an_unusable_oauth_server_fails_loudly(
    harness: Harness,
) -> None:
    # Publishing refuses it (validate: no redirect URI); a Version built by hand
    # and started directly must not run as if the server were absent.
    data = {
        "kind": "agent",
        "name": "eager",
        "model": {"model": "fake-model"},
        "mcp_servers": [
            {"name": "crm", "url": "https://crm.test", "oauth": {"grant": "authorization_code"}}
        ],
    }
    spec = parse_spec(data, source="test")
    version = Version(hash=version_hash(spec), spec=spec, published_at=datetime.now(UTC))
    run_id = f"unusable{len(harness.fake.requests)}"
    async with harness.worker():
        handle = await harness.env.client.start_workflow(
            AGENT_RUN,
            AgentRunInput(run_id=run_id, version=version, scope=harness.scope, messages=("hi",)),
            id=f"psych-acme-{run_id}",
            task_queue=harness.settings.task_queue,
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
    # No client is registered dynamically either: it would name no redirect URI.
    assert str(failed.value.cause) == (
        "RunFailed: MCP server 'crm' is unreachable: crm: authorization_code needs "
        "oauth.redirect_uris (where the operator's OAuth callback listens: psych "
        "oauth-callback, or psych serve's /oauth/callback)"
    )
    assert harness.fake.requests == []  # no model call was made
