"""No size or sender of a resume, steer or abort, sent with the plain ``temporal`` CLI,
fails the Run's workflow task (issue 26, item 6).

Over ``MAX_NAME_CHARS`` / ``MAX_TEXT_CHARS`` the Run's validator refuses (before quoting
what it refuses); over the dev server's in-flight update bound (``UPDATE_PAYLOADS_ARGS``,
1.5 MiB) the server refuses an update, and over its blob limit (2 MiB) a signal, before the
Run sees either. Either way the Run keeps answering and completes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType

from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunHandle, RunStatus

from .conftest import Harness
from .test_suspensions import suspended
from .test_temporal_cli_approval import (
    Cli,
    assert_approved_by_ops,
    orders_agent,
    resume_input,
    temporal,
)

pytestmark = pytest.mark.e2e

PASSES_THE_SERVER = 1_400_000
"""Under the in-flight update bound (1.5 MiB): the Run's validator must refuse it."""
OVER_EVERY_BOUND = 3_000_000
"""Over the in-flight bound and the blob limit, under the gRPC limit (4 MiB)."""


async def send(harness: Harness, run: RunHandle, how: str, name: str, body: Any) -> Cli:
    """``temporal workflow update execute`` or ``signal`` with ``body`` as its JSON input
    (from a file: a command line argument holds at most 128 KiB)."""
    path = harness.home / f"input-{name}-{how}.json"
    path.write_text(json.dumps(body))
    command = ("update", "execute") if how == "update" else ("signal",)
    return await temporal(
        harness,
        "workflow",
        *command,
        "--workflow-id",
        run.workflow_id,
        "--name",
        name,
        "--input-file",
        str(path),
        # The CLI retries a server's RESOURCE_EXHAUSTED until its deadline.
        "--command-timeout",
        "10s",
    )


async def assert_still_suspended(harness: Harness, run: RunHandle) -> None:
    state = await harness.client.status(run, scope=harness.scope)
    assert state.status is RunStatus.SUSPENDED, state.reason
    assert len(state.pending) == 1


async def test_no_size_or_sender_fails_the_workflow_task(harness: Harness) -> None:
    deleted: list[str] = []
    spec = orders_agent(harness, deleted)
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("delete_order", {"order_id": "42"})),
        Reply.text("Deleted order 42."),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "delete 42", scope=harness.scope)
        (pending,) = (await suspended(harness, run)).pending
        approval = json.loads(resume_input(pending.id))

        # Under the server's bound: the validator refuses, naming the field, not echoing it.
        unknown = {**approval, "id": "call_" + "x" * PASSES_THE_SERVER}
        refused = await send(harness, run, "update", "psych.resume", unknown)
        assert refused.code != 0
        assert "TooLarge" in refused.err
        assert f"id is {PASSES_THE_SERVER + 5} characters; at most 1024" in refused.err
        assert len(refused.err) < 10_000
        await assert_still_suspended(harness, run)

        stranger = {**approval, "tenant": "t" * PASSES_THE_SERVER}
        for how, name, body in (
            ("update", "psych.resume", stranger),
            ("update", "psych.abort", {"tenant": stranger["tenant"]}),
            ("update", "psych.steer", {"tenant": stranger["tenant"], "message": "hi"}),
        ):
            refused = await send(harness, run, how, name, body)
            assert refused.code != 0, name
            assert f"tenant is {PASSES_THE_SERVER} characters" in refused.err, name
            await assert_still_suspended(harness, run)

        # Over every bound: the server refuses an update or a signal before the Run sees it.
        huge = {**approval, "id": "call_" + "x" * OVER_EVERY_BOUND}
        for how, name, body in (
            ("update", "psych.resume", huge),
            ("update", "psych.abort", {"tenant": "acme", "reason": "r" * OVER_EVERY_BOUND}),
            ("signal", "psych.resume", huge),
            ("signal", "psych.steer", {"tenant": "acme", "message": "m" * OVER_EVERY_BOUND}),
        ):
            refused = await send(harness, run, how, name, body)
            assert refused.code != 0, (how, name)
            await assert_still_suspended(harness, run)

        # A signal the server takes is ignored by the Run, which keeps waiting.
        ignored = await send(harness, run, "signal", "psych.abort", {"tenant": stranger["tenant"]})
        assert ignored.code == 0, ignored.err
        await assert_still_suspended(harness, run)

        done = await send(harness, run, "update", "psych.resume", approval)
        assert done.code == 0, done.err
        await assert_approved_by_ops(harness, run, pending.id)
        history = await harness.env.client.get_workflow_handle(run.workflow_id).fetch_history()
        failed = [
            e for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
        ]
        assert failed == []
    assert deleted == ["42"]
