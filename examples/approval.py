"""An agent that waits for a person's approval, offline (fake model, embedded dev server).

The worker's Policy asks before every ``close_account`` call (what ``psych worker --ask
close_account`` builds). The model calls it; the Run suspends (a Temporal workflow waiting
on a condition, as long as the Spec's ``approval_expires_seconds``); an operator approves
it here through ``PsychClient.approve``, as ``psych approve <run> <call id>`` would; the
tool runs and the model answers.

    python examples/approval.py
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from _offline import MODEL, SCOPE, load, offline, run, status
from tools import registry

from psych_runtime.activities import RulePolicy
from psych_runtime.specs import Scope
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers import exit_process
from psych_runtime.workflows import PsychClient, RunHandle, Suspended


def approver(client: PsychClient) -> Callable[[RunHandle], Callable[[Any], Awaitable[None]]]:
    """Approve each tool call the Run waits on, as operator ``ops``."""

    def watch(handle: RunHandle) -> Callable[[Any], Awaitable[None]]:
        async def on_record(record: Any) -> None:
            if isinstance(record, Suspended) and record.pending.reason == "approval":
                print(f"    (operator ops approves {record.pending.id})", flush=True)
                operator = Scope(tenant=SCOPE.tenant, principal="ops")
                await client.approve(handle, record.pending.id, scope=operator, note="verified")

        return on_record

    return watch


async def main() -> int:
    spec = load("approval-agent.yaml")
    replies = (
        Reply.tool_calls(ToolCall("close_account", {"account_id": "acct-7"}, id="call_close")),
        Reply.text("Account acct-7 is closed."),
    )
    policy = RulePolicy(tools={"close_account": "ask"})
    async with offline(*replies, registry=registry, policy=policy) as client:
        print(f"model: the fake model as {MODEL}; close_account waits for approval")
        report = await run(client, spec, "Please close my account acct-7.", approver(client))
    return status(report)


if __name__ == "__main__":
    exit_process(asyncio.run(main()))
