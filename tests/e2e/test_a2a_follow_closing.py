"""An A2A stream closed by its consumer between two events ends its task's close watch
(``serve/a2a/_closing.py``: a long-poll of the Run's execution's close) before the close
returns, not later by the event loop's finalizer of the generators it left unclosed.
Driven through ``PsychRequestHandler`` (the object the A2A SDK calls) with the session's
dev server, a worker and the scriptable model server."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from a2a.server.context import ServerCallContext

from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply
from psych_runtime.workers.serve._auth import Caller
from psych_runtime.workers.serve.a2a._calls import AGENT_KEY, CALLER_KEY
from psych_runtime.workers.serve.a2a._cards import AgentCatalogue
from psych_runtime.workers.serve.a2a._handler import PsychRequestHandler
from psych_runtime.workers.serve.a2a._push import PushRegistry
from psych_runtime.workers.serve.a2a._push_store import MemoryTokenStore, PushStore

from .conftest import Harness
from .test_a2a_serve import user

pytestmark = pytest.mark.e2e


def _watching() -> list[asyncio.Task[object]]:
    """The close watches still running in this loop."""
    return [
        task
        for task in asyncio.all_tasks()
        if not task.done() and getattr(task.get_coro(), "__name__", "") == "execution_closed"
    ]


@pytest.mark.timeout(60)
async def test_a_send_stream_closed_mid_answer_ends_its_close_watch_with_it(
    harness: Harness,
) -> None:
    # The consumer (the SDK, a client gone) closes the stream while the answer streams:
    # the generators between it and the watch were left to the loop's finalizer, which
    # closes them later, in tasks of its own.
    agent = "a2a_closing"
    harness.client.publish(AgentBuilder(agent).model("fake-model").build())
    harness.fake.enqueue(Reply.stall(30, after_chunks=1, then=Reply.text("Once upon a time")))
    pushes = PushRegistry(store=PushStore(MemoryTokenStore()), lease_seconds=30)
    handler = PsychRequestHandler(
        harness.client,
        AgentCatalogue(harness.client.store),
        pushes,
        query_timeout=timedelta(seconds=2),
    )
    context = ServerCallContext(state={CALLER_KEY: Caller(harness.scope), AGENT_KEY: agent})
    try:
        async with harness.worker():
            stream = handler.on_message_send_stream(user("tell me a story"), context)
            async with asyncio.timeout(30):
                await anext(stream)  # the task
                await anext(stream)  # its first draft chunk: the watch is on
            assert len(_watching()) == 1
            await stream.aclose()
            assert _watching() == []
    finally:
        await pushes.aclose()
