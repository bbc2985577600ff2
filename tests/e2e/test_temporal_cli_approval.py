"""Approving a suspended Run with nothing but the ``temporal`` CLI (docs/guides/temporal-cli.md,
"Approvals with the plain temporal CLI"), against the session dev server.

``psych.resume`` is both an update (answers with a ResumeResult, or fails with the reason
it was refused) and a signal (fire and forget: an invalid one is logged and ignored); both
take the ResumeInput as plain JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass

import pytest

from psych_runtime.activities.tools import RulePolicy
from psych_runtime.specs import AgentBuilder, AgentSpec
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers import temporal_binary
from psych_runtime.workflows import Resumed, RunHandle, RunStatus, ToolCallFinished

from .conftest import Harness
from .test_suspensions import suspended

pytestmark = pytest.mark.e2e


@dataclass(frozen=True)
class Cli:
    code: int
    out: str
    err: str


async def temporal(harness: Harness, *args: str) -> Cli:
    """Run ``temporal <args> --address <the session server>``."""
    # TEMPORAL_* variables (a developer's profile) must not redirect the CLI.
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
    address = harness.env.client.service_client.config.target_host
    child = await asyncio.create_subprocess_exec(
        temporal_binary(),
        *args,
        "--address",
        address,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(30):
        out, err = await child.communicate()
    assert child.returncode is not None
    return Cli(child.returncode, out.decode(), err.decode())


def resume_input(call_id: str, *, approved: bool = True) -> str:
    return json.dumps(
        {"reason": "approval", "id": call_id, "tenant": "acme", "approved": approved, "by": "ops"}
    )


def orders_agent(harness: Harness, deleted: list[str]) -> AgentSpec:
    @harness.registry.register(destructive=True)
    def delete_order(order_id: str) -> str:
        """Delete an order for good."""
        deleted.append(order_id)
        return f"order {order_id} deleted"

    harness.settings.policy = RulePolicy(destructive="ask")
    builder = AgentBuilder("orders", registry=harness.registry).model("fake-model")
    return builder.tool("delete_order").build()


async def assert_approved_by_ops(harness: Harness, run: RunHandle, call_id: str) -> None:
    result = await harness.client.result(run, scope=harness.scope)
    records = (await harness.client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.COMPLETED, result.reason
    resumed = [(r.reason, r.id, r.by, r.outcome) for r in records if isinstance(r, Resumed)]
    assert resumed == [("approval", call_id, "ops", "approved")]
    finished = [(r.call_id, r.status) for r in records if isinstance(r, ToolCallFinished)]
    assert finished == [(call_id, "ok")]


async def test_update_execute_approves_and_the_run_completes(harness: Harness) -> None:
    deleted: list[str] = []
    spec = orders_agent(harness, deleted)
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("delete_order", {"order_id": "42"})),
        Reply.text("Deleted order 42."),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "delete 42", scope=harness.scope)
        (pending,) = (await suspended(harness, run)).pending
        update = ("workflow", "update", "execute", "--workflow-id", run.workflow_id)

        # A stale id is refused: non-zero exit, the workflow's reason on stderr.
        stale = await temporal(
            harness, *update, "--name", "psych.resume", "--input", resume_input("call_nope")
        )
        assert stale.code != 0
        assert "nothing pending with id 'call_nope'" in stale.err
        assert "UnknownPending" in stale.err

        done = await temporal(
            harness,
            *update,
            "--name",
            "psych.resume",
            "--input",
            resume_input(pending.id),
            "-o",
            "json",
        )
        assert done.code == 0, done.err
        assert json.loads(done.out)["result"] == {
            "reason": "approval",
            "id": pending.id,
            "outcome": "approved",
        }
        await assert_approved_by_ops(harness, run, pending.id)

        # Settled: a second approval is refused.
        again = await temporal(
            harness, *update, "--name", "psych.resume", "--input", resume_input(pending.id)
        )
        assert again.code != 0
        assert "already completed" in again.err
    assert deleted == ["42"]


async def test_signal_approves_and_the_run_completes(harness: Harness) -> None:
    deleted: list[str] = []
    spec = orders_agent(harness, deleted)
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("delete_order", {"order_id": "7"})),
        Reply.text("Deleted order 7."),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "delete 7", scope=harness.scope)
        (pending,) = (await suspended(harness, run)).pending
        signal = ("workflow", "signal", "--workflow-id", run.workflow_id, "--name", "psych.resume")

        # A signal cannot be refused to the sender: a wrong tenant is accepted by the
        # server, logged and ignored by the Run, which keeps waiting.
        wrong = json.loads(resume_input(pending.id))
        wrong["tenant"] = "globex"
        ignored = await temporal(harness, *signal, "--input", json.dumps(wrong))
        assert ignored.code == 0, ignored.err
        state = await harness.client.status(run, scope=harness.scope)
        assert state.status is RunStatus.SUSPENDED
        assert deleted == []

        sent = await temporal(harness, *signal, "--input", resume_input(pending.id))
        assert sent.code == 0, sent.err
        assert "Signal workflow succeeded" in sent.out
        await assert_approved_by_ops(harness, run, pending.id)
    assert deleted == ["7"]
