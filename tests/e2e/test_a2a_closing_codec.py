"""A task's close watch (``serve/a2a/_closing.py``) learns that the Run's workflow
execution closed without decoding what the close holds (a result, a failure, a
terminate's details): a serve whose payload codec cannot decode it (a key it may not
use) still ends a stream when the execution closes, and a large result is not decoded
for nothing. The serve's codec here refuses every decode made in the watch's own task;
reads of the Run's records (queries) it lets through. Real dev server, worker, model
server, ``psych serve`` on loopback."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Sequence

import pytest
from a2a.types import SubscribeToTaskRequest, TaskState
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.converter import PayloadCodec

from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers.serve.a2a._closing import execution_closed
from psych_runtime.workflows import TEMPORAL_READ_TIMEOUT, PsychClient

from ._reset import reset_to_first_task
from ._serve import ACME, asking_agent, served
from ._waiting import is_waiting, state_when
from .conftest import Harness
from .test_a2a_serve import a2a_client, collect, last_status, user

pytestmark = pytest.mark.e2e


class RefusedInTheWatch(Exception):
    """What the codec raises: the serve may not decode this payload."""


class RefusingInTheWatch(PayloadCodec):
    """Passes payloads through, but refuses (and counts) every decode the close watch
    makes: it runs in a task of its own, ``execution_closed``."""

    def __init__(self) -> None:
        self.refused = 0

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        task = asyncio.current_task()
        if task is not None and getattr(task.get_coro(), "__name__", "") == "execution_closed":
            self.refused += 1
            raise RefusedInTheWatch("access denied to the key of this payload")
        return list(payloads)


def _with_codec(temporal: Client, codec: PayloadCodec) -> Client:
    converter = dataclasses.replace(temporal.data_converter, payload_codec=codec)
    config = temporal.config()
    config["data_converter"] = converter
    return Client(**config)


@pytest.mark.timeout(60)
async def test_a_stream_ends_when_the_serve_cannot_decode_the_terminated_executions_details(
    harness: Harness,
) -> None:
    # Terminated with details while no worker polls: the watch decoded the details (as
    # result() raises them), the codec refused, and the stream failed with its error
    # instead of ending failed, as the listing shows the task.
    agent = asking_agent(harness, "a2a_codec")
    codec = RefusingInTheWatch()
    serving = PsychClient(
        _with_codec(harness.client.temporal, codec),
        store=harness.client.store,
        task_queue=harness.client.task_queue,
        registry=harness.registry,
    )
    async with (
        served(harness, query_timeout_seconds=2, client=serving) as base,
        a2a_client(base, agent, ACME) as client,
    ):
        async with harness.worker():
            asked = await collect(client.send_message(user("book it")))
            task_id = asked[0].task.id
            stream = client.subscribe(SubscribeToTaskRequest(id=task_id))
            first = await anext(stream)
        assert first.task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        handle = harness.client.temporal.get_workflow_handle(f"psych-acme-{task_id}")
        await handle.terminate("sealed details", reason="an operator's terminate")
        started = time.monotonic()
        async with asyncio.timeout(15):
            rest = await collect(stream)
        assert time.monotonic() - started < 8
    assert codec.refused == 0
    end = last_status(rest)
    assert end.state == TaskState.TASK_STATE_FAILED
    assert end.message.parts[0].text == (
        "Temporal closed the Run's workflow execution (terminated) before the Run settled: "
        "an operator's terminate"
    )


@pytest.mark.timeout(60)
async def test_the_close_watch_of_a_completed_run_does_not_decode_its_result(
    harness: Harness,
) -> None:
    # Watched while it runs (a closed execution is told by describe alone), then it
    # completes with a large result: the watch decoded it, and the codec refused.
    version = harness.client.publish(AgentBuilder("a2a_codec_done").model("fake-model").build())
    harness.fake.enqueue(Reply.stall(2, then=Reply.text("x" * 200_000)))
    codec = RefusingInTheWatch()
    temporal = _with_codec(harness.client.temporal, codec)
    async with harness.worker():
        run = await harness.client.dispatch(version, "a long answer", scope=harness.scope)
        watch = asyncio.create_task(
            execution_closed(temporal, run.workflow_id, TEMPORAL_READ_TIMEOUT)
        )
        async with asyncio.timeout(30):
            result = await harness.client.result(run, scope=harness.scope)
            await watch
    assert result.answer == "x" * 200_000
    assert codec.refused == 0


@pytest.mark.timeout(60)
async def test_the_close_watch_goes_on_past_a_reset_to_the_execution_it_runs_on(
    harness: Harness,
) -> None:
    # A reset terminates the execution watched and runs on in a new one: not an end.
    version = harness.client.publish(
        AgentBuilder("a2a_codec_reset")
        .model("fake-model")
        .suspension(may_ask_questions=True)
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("ask_question", {"question": "Which day?"}, id="q1"))
    )
    temporal = harness.client.temporal
    async with harness.worker():
        run = await harness.client.dispatch(version, "book it", scope=harness.scope)
        await state_when(harness.client, run, harness.scope, is_waiting, what="the question")
    watch = asyncio.create_task(execution_closed(temporal, run.workflow_id, TEMPORAL_READ_TIMEOUT))
    try:
        await asyncio.sleep(0.5)  # the watch waits on the first execution's close
        await reset_to_first_task(temporal, run.workflow_id)
        done, _ = await asyncio.wait({watch}, timeout=2)
        assert not done
        await temporal.get_workflow_handle(run.workflow_id).terminate(reason="the end")
        async with asyncio.timeout(10):
            await watch
    finally:
        watch.cancel()
