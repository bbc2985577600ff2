"""Workers of one task queue must share an approval policy: a worker whose policy differs
from a live one's refuses to start, against the session dev server."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import socket
import sys
from collections.abc import Mapping
from typing import Any

from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

from psych_runtime.activities import (
    PolicyDecision,
    RulePolicy,
    ToolInfo,
    policy_description,
    policy_digest,
)
from psych_runtime.specs import Scope
from psych_runtime.workers import run_worker, worker_identity
from psych_runtime.workers.fleet._policy import digest_in_identity

from .conftest import TOOLS_REF, Cli, read_until, spawn

PSYCH = (sys.executable, "-m", "psych_runtime.workers.cli")


class Custom:
    def fixed(self, tool: ToolInfo) -> PolicyDecision | None:
        return None

    async def decide(
        self, scope: Scope, tool: ToolInfo, arguments: Mapping[str, Any]
    ) -> PolicyDecision:
        return PolicyDecision(decision="allow", reason="custom")


class Described(Custom):
    def __init__(self, limit: int) -> None:
        self.limit = limit

    def describe(self) -> str:
        return f"refunds up to {self.limit}"


def test_policy_descriptions_are_stable_and_readable() -> None:
    asking = RulePolicy(tools={"issue_refund": "ask", "delete_*": "ask"}, destructive="ask")
    assert policy_description(asking) == (
        "RulePolicy(delete_*: ask; issue_refund: ask; read_only: allow, write: allow, "
        "destructive: ask)"
    )
    # Neighbours with one decision may swap; a different order of decisions may not.
    swapped = RulePolicy(tools={"delete_*": "ask", "issue_refund": "ask"}, destructive="ask")
    assert policy_digest(swapped) == policy_digest(asking)
    first = RulePolicy(tools={"issue_*": "deny", "issue_refund": "ask"})
    second = RulePolicy(tools={"issue_refund": "ask", "issue_*": "deny"})
    assert policy_digest(first) != policy_digest(second)
    assert policy_digest(RulePolicy()) != policy_digest(asking)
    assert len(policy_digest(asking)) == 8

    module = Custom.__module__
    assert policy_description(Custom()) == f"{module}.Custom"
    assert policy_description(Described(50)) == f"{module}.Described(refunds up to 50)"
    assert policy_digest(Described(50)) != policy_digest(Described(90))
    here = f"{os.getpid()}@{socket.gethostname()}"
    assert worker_identity(asking) == f"{here}+{policy_digest(asking)}"
    assert worker_identity(asking, "w1") == f"w1+{policy_digest(asking)}"
    # Both forms are read: this one, and the one workers wrote before it (a fleet being
    # upgraded has both on its queues).
    assert digest_in_identity(worker_identity(asking)) == policy_digest(asking)
    assert digest_in_identity("psych@host:12 policy=0123abcd") == "0123abcd"
    assert digest_in_identity("12@host") is None


async def poller_identities(cli: Cli, queue: str | None = None) -> set[str]:
    """Identities polling the fixture's queue (or ``queue``) for both workflow and activity
    tasks; of an activity-only queue (a role's), for activity tasks."""
    found: list[set[str]] = []
    types = (TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY)
    for task_type in types if queue is None else types[1:]:
        response = await cli.env.client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=cli.env.client.namespace,
                task_queue=TaskQueue(
                    name=queue or cli.task_queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL
                ),
                task_queue_type=task_type,
            )
        )
        found.append({poller.identity for poller in response.pollers})
    return set.intersection(*found)


async def test_a_worker_with_another_policy_refuses_to_join_the_queue(cli: Cli) -> None:
    env = cli.child_env(TEMPORAL_ADDRESS=cli.address, PSYCH_TASK_QUEUE=cli.task_queue)
    async with cli.worker():  # the default policy: everything allowed, as `psych dev` has
        first = worker_identity(cli.settings.policy)
        # The server's poller list lags a little: check once the first worker is on it.
        for _ in range(100):
            if first in await poller_identities(cli):
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"{first} never appeared among the pollers")

        asking = RulePolicy(tools={"issue_refund": "ask"})
        refused = await spawn(
            [*PSYCH, "worker", "--tools", TOOLS_REF, "--ask", "issue_refund"], env, cli.home
        )
        async with asyncio.timeout(30):
            out, err = await refused.communicate()
        assert refused.returncode == 1, (out, err)
        message = err.decode()
        assert message.startswith(
            f"psych: refusing to start: task queue {cli.task_queue!r} is polled by {first!r} "
            f"(policy={policy_digest(RulePolicy())}), whose approval policy differs from this "
            f"worker's (policy={policy_digest(asking)}: {policy_description(asking)})."
        ), message
        assert message.count("\n") == 1  # one line, no traceback

        same = await spawn([*PSYCH, "worker", "--tools", TOOLS_REF], env, cli.home)
        assert same.stdout is not None
        try:
            started = await read_until(same.stdout, "Ctrl-C to stop")
        finally:
            same.send_signal(signal.SIGINT)
            async with asyncio.timeout(20):
                _, same_err = await same.communicate()
        assert same.returncode == 0, same_err.decode()
        assert f"policy {policy_digest(RulePolicy())}: {policy_description(RulePolicy())}\n" in (
            started
        )


async def test_a_workflows_worker_with_another_policy_than_the_fleets_tools_workers_refuses(
    cli: Cli,
) -> None:
    # The tools role decides approvals for the Runs a workflows-role worker starts: a
    # workflows worker started with --ask beside tools workers without it printed
    # "approval needed for: issue_refund" and every refund then ran unasked.
    tools_queue = f"{cli.task_queue}-tools"
    tools_only = dataclasses.replace(cli.settings, roles=("tools",))
    env = cli.child_env(TEMPORAL_ADDRESS=cli.address, PSYCH_TASK_QUEUE=cli.task_queue)
    async with run_worker(cli.env.client, tools_only):
        first = worker_identity(cli.settings.policy)
        for _ in range(100):
            if first in await poller_identities(cli, tools_queue):
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"{first} never appeared among the pollers")

        refused = await spawn(
            [
                *PSYCH,
                "worker",
                "--role",
                "workflows",
                "--tools",
                TOOLS_REF,
                "--ask",
                "issue_refund",
            ],
            env,
            cli.home,
        )
        try:
            async with asyncio.timeout(30):
                out, err = await refused.communicate()
        finally:
            if refused.returncode is None:  # it started (the defect): stop it
                refused.send_signal(signal.SIGINT)
                await refused.wait()
        assert refused.returncode == 1, (out, err)
        message = err.decode()
        assert message.startswith(
            f"psych: refusing to start: task queue {tools_queue!r} is polled by {first!r} "
        ), message
        assert message.count("\n") == 1

        # The model role decides nothing: its workers are not held to the tools role's.
        model = await spawn(
            [*PSYCH, "worker", "--role", "model", "--tools", TOOLS_REF, "--ask", "issue_refund"],
            env,
            cli.home,
        )
        assert model.stdout is not None
        try:
            await read_until(model.stdout, "Ctrl-C to stop")
        finally:
            model.send_signal(signal.SIGINT)
            async with asyncio.timeout(20):
                _, model_err = await model.communicate()
        assert model.returncode == 0, model_err.decode()
