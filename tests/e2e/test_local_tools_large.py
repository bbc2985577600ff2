"""A turn of local tool calls whose results, shown whole, would not fit one workflow task
(issue 27: every rule of a normal tool call holds for a local one).

Local calls' results travel in the markers of the workflow task that ran them, all in one
completion, which gRPC caps at 4 MB; a normal activity's result travels alone. A turn of
16 calls each returning 300 KB (shown whole: under ``large_result_bytes`` and the 512 KiB
a result shown whole may be) failed the Run with ``GrpcMessageTooLarge``. A call whose
result is over its share of the task runs again as an activity instead.
"""

from __future__ import annotations

import logging

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.worker import Replayer

from psych_runtime.activities.contract import TOOL_RUN_CODE
from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers import PsychPlugin
from psych_runtime.workflows import AgentRun, RunStatus, WorkflowRun

from .conftest import Harness

CALLS = 16
WORDS = 100_000
"""Each result is ``WORDS`` words of 3 bytes: 300 KB, 16 of them 4.8 MB."""


def chapter(number: int) -> str:
    """A chapter of the manual.

    Args:
        number: Which chapter.
    """
    return f"c{number:02d}" * WORDS


async def test_local_results_past_a_task_s_room_complete_as_any_results(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    harness.registry.register(chapter, idempotent=True, read_only=True, local_seconds=5.0)
    harness.fake.enqueue(
        Reply.tool_calls(*[ToolCall("chapter", {"number": n}) for n in range(CALLS)]),
        Reply.text("Read them all."),
    )
    spec = (
        AgentBuilder("reader-local", registry=harness.registry)
        .model("fake-model")
        .tool("chapter")
        .limits(large_result_bytes=400_000)
        .build()
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "Read the manual.", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    assert [(c.status, c.truncated, c.size) for c in report.tool_calls] == [
        ("ok", False, 3 * WORDS)
    ] * CALLS
    assert [c.result for c in report.tool_calls] == [f"c{n:02d}" * WORDS for n in range(CALLS)]
    # Each over its share (2 MiB among 16): each ran again as an activity.
    history = await harness.env.client.get_workflow_handle(run.workflow_id).fetch_history()
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert scheduled.count(TOOL_RUN_CODE) == CALLS
    # And the failed local calls, each followed by its activity, replay.
    replayer = Replayer(workflows=[AgentRun, WorkflowRun], plugins=[PsychPlugin()])
    replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is None, replayed.replay_failure
    # The fall back is a turn the worker expects, not a failure it warns of, once per call.
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [r for r in warned if "Completing activity as failed" in r.getMessage()]


CHARACTERS = 120_000
"""Each result is ``CHARACTERS`` characters of 3 UTF-8 bytes: 360 KB, under its share of 2 MiB
among 16 (131,072) counted in characters, over it in bytes; 16 of them 5.8 MB."""


def kapitel(number: int) -> str:
    """A chapter of the manual, in a script of three bytes a character.

    Args:
        number: Which chapter.
    """
    return chr(0x4E00 + number) * CHARACTERS


async def test_a_local_result_s_share_counts_bytes_not_characters(harness: Harness) -> None:
    harness.registry.register(kapitel, idempotent=True, read_only=True, local_seconds=5.0)
    harness.fake.enqueue(
        Reply.tool_calls(*[ToolCall("kapitel", {"number": n}) for n in range(CALLS)]),
        Reply.text("Read them all."),
    )
    spec = (
        AgentBuilder("reader-local-utf8", registry=harness.registry)
        .model("fake-model")
        .tool("kapitel")
        .limits(large_result_bytes=400_000)
        .build()
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "Read the manual.", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        # The records pages too are bounded in bytes: counted in characters, a page of
        # these results (2.9 MB) failed the query, 'Blob data size exceeds limit'.
        report = await harness.client.report(run, scope=harness.scope)
    # Counted in characters, each passed as a local call, and the turn's task completion
    # (5.8 MB) failed the Run: GrpcMessageTooLarge.
    assert result.status is RunStatus.COMPLETED, result.reason
    assert [(c.status, c.truncated, c.size) for c in report.tool_calls] == [
        ("ok", False, 3 * CHARACTERS)
    ] * CALLS
    history = await harness.env.client.get_workflow_handle(run.workflow_id).fetch_history()
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert scheduled.count(TOOL_RUN_CODE) == CALLS
