"""Exactly-once through a hook: a worker that dies between a pre hook and a call not safe
to repeat leaves the call UNKNOWN, never sent, and never sent again by the next worker.

The worker runs in its own process (``_worker_proc``) with a global settings file
(``PSYCH_SETTINGS``) whose pre command hook on the POST tool SIGKILLs the worker itself, its
parent: the hook has run, the request has not been sent. A worker in the test process, with
no hooks, then takes over the task queue.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from psych_runtime.specs import AgentBuilder, Scope
from psych_runtime.testing import FakeModel, Reply, ToolCall
from psych_runtime.workflows import RunStatus
from psych_runtime.workflows.kernel._tool_calls import UNKNOWN_OUTCOME

from ._crash import doomed_worker
from ._http_server import CountingServer, refund_tool

pytestmark = pytest.mark.e2e


async def test_a_worker_dying_after_a_pre_hook_leaves_a_post_unknown_and_unsent(
    dev_env: WorkflowEnvironment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    refunds = CountingServer().start()
    kill_parent = "import os, signal; os.kill(os.getppid(), signal.SIGKILL)"
    settings = tmp_path / "settings.yaml"
    settings.write_text(
        "hooks: {pre: {refund: {command: ["
        f"{json.dumps(sys.executable)}, '-c', {json.dumps(kill_parent)}]}}}}}}\n",
        encoding="utf-8",
    )
    spec = (
        AgentBuilder("refunder")
        .model("fake-model")
        .http_tool("refund", **refund_tool(refunds.url))
        .build()
    )
    scope = Scope(tenant="acme")
    try:
        async with FakeModel(models=("fake-model",)) as fake:
            fake.enqueue(
                Reply.tool_calls(ToolCall("refund", {"order_id": "42"})),
                Reply.text("I could not confirm the refund."),
            )
            # The worker process inherits PSYCH_SETTINGS; the survivor must not have it.
            monkeypatch.setenv("PSYCH_SETTINGS", str(settings))
            queue = f"hookcrash-{uuid.uuid4().hex[:12]}"
            async with doomed_worker(dev_env.client, queue, tmp_path, fake.base_url) as doomed:
                monkeypatch.delenv("PSYCH_SETTINGS")
                run = await doomed.psych.dispatch(spec, "Refund order 42", scope=scope)
                # The hook kills the worker as soon as the call reaches it.
                await asyncio.wait_for(doomed.proc.wait(), timeout=30)
                async with doomed.survivor():
                    result = await asyncio.wait_for(
                        doomed.psych.result(run, scope=scope), timeout=60
                    )
                    report = await doomed.psych.report(run, scope=scope)
    finally:
        refunds.stop()
    assert result.status is RunStatus.COMPLETED
    (call,) = report.tool_calls
    assert (call.tool, call.status, call.result) == ("refund", "unknown", UNKNOWN_OUTCOME)
    assert refunds.seen == []  # not sent by the dead worker, nor again by the survivor
