"""Model-written text holding a bidirectional override (U+202E, CVE-2021-42574) in a task
title, a component's label and the answer, end to end on a real dev server: what ``psych``
prints of it (record lines, report, status, transcript, inputs) shows the character as
its escape, while the records, the state and the JSON report keep the exact string.

The terminal's styled output takes the same ``printable`` text (``tests/workers``); the
console's HTML is checked in a browser (``tests/serve/test_console_bidi.py``).
"""

from __future__ import annotations

import io
import json

import pytest

from psych_runtime.activities.versions import FileVersionStore
from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers import follow_run, format_report
from psych_runtime.workers.console import (
    format_state,
    print_inputs,
    print_transcript,
    read_transcript,
)
from psych_runtime.workflows import ComponentShown, PsychClient, RunStatus, TasksUpdated

from .conftest import Harness

pytestmark = pytest.mark.e2e

RLO = "\u202e"
TITLE = f"pay {RLO}cod.exe"
LABEL = f"rate {RLO}%5.2"
ANSWER = f"Refunded {RLO}24 order"


async def test_a_bidi_override_is_printed_escaped_and_kept_in_the_data(
    harness: Harness,
) -> None:
    spec = AgentBuilder("shower").model("fake-model").tasks(True).components(True).build()
    metric = {"kind": "metric", "label": LABEL, "value": "2.5"}
    harness.fake.enqueue(
        Reply.tool_calls(
            ToolCall("update_tasks", {"tasks": [{"title": TITLE, "status": "in_progress"}]}),
            ToolCall("show_component", {"component": metric}),
        ),
        Reply.text(ANSWER),
    )
    client = harness.client
    async with harness.worker():
        run = await client.dispatch(spec, "Refund 42", scope=harness.scope)
        result = await client.result(run, scope=harness.scope)
        records = [r async for r in client.stream(run, scope=harness.scope)]
        report = await client.report(run, scope=harness.scope)
        blobs = harness.settings.blobs
        with_blobs = PsychClient(
            harness.env.client,
            store=FileVersionStore(harness.home / "versions"),
            task_queue=harness.settings.task_queue,
            registry=harness.registry,
            blobs=blobs,
        )
        sent = await with_blobs.report(run, scope=harness.scope, inputs=True)
        state = await client.status(run, scope=harness.scope)
        printed = io.StringIO()
        await follow_run(client, run, scope=harness.scope, out=printed, full=True)
        as_json = io.StringIO()
        await follow_run(client, run, scope=harness.scope, out=as_json, json_report=True)
        transcript = io.StringIO()
        markdown = io.StringIO()
        read = await read_transcript(client, run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED

    # The data keeps the exact strings.
    (tasks,) = [r for r in records if isinstance(r, TasksUpdated)]
    (shown,) = [r for r in records if isinstance(r, ComponentShown)]
    assert tasks.tasks[0].title == TITLE
    assert getattr(shown.component, "label", None) == LABEL
    assert (report.answer, state.answer, state.tasks[0].title) == (ANSWER, ANSWER, TITLE)
    dumped = json.loads(as_json.getvalue())
    assert dumped["answer"] == ANSWER
    assert dumped["tasks"][0]["title"] == TITLE
    assert dumped["components"][0]["component"]["label"] == LABEL
    assert json.loads(state.model_dump_json())["answer"] == ANSWER

    # What people read shows each as its escape.
    print_transcript(read, transcript, markdown=False)
    print_transcript(read, markdown, markdown=True)
    inputs = io.StringIO()
    print_inputs(sent, inputs)
    assert TITLE in sent.model_dump_json()  # the data: the second call's system prompt
    assert RLO not in inputs.getvalue()
    assert "pay \\u202ecod.exe" in inputs.getvalue()
    for text in (
        printed.getvalue(),
        format_report(report),
        format_state(run.workflow_id, state),
        transcript.getvalue(),
        markdown.getvalue(),
    ):
        assert RLO not in text
        assert "Refunded \\u202e24 order" in text
    for text in (
        printed.getvalue(),
        format_report(report),
        format_state(run.workflow_id, state),
        transcript.getvalue(),
    ):
        assert "pay \\u202ecod.exe" in text
    for text in (printed.getvalue(), format_report(report)):
        assert "metric: rate \\u202e%5.2 = 2.5" in text
