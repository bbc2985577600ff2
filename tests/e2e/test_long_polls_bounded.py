"""A history long poll (``wait_new_event``) waits ``HISTORY_LONG_POLL_TIMEOUT`` at most, then
says which Run and what Temporal did not answer: a follower's watch (``_follow.py``,
``HistoryNotRead``; a REST event stream ends with its 503 ``temporal`` event), the close
watch of an A2A stream (``_closing.py``) and ``PsychClient.result`` (``TemporalUnanswered``).
Temporal is the session's dev server behind a gRPC relay that holds the history reads
unanswered on cue; and a long poll Temporal answers empty after its own interval is not
taken for its silence."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator

import grpc
import httpx
import pytest

from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers.serve import AuthSettings, ServeSettings, create_app
from psych_runtime.workers.serve._problems import problem_of
from psych_runtime.workers.serve.a2a._closing import until_closed
from psych_runtime.workflows import (
    HISTORY_LONG_POLL_TIMEOUT,
    HistoryNotRead,
    RunStatus,
    TemporalUnanswered,
)
from psych_runtime.workflows.client import _follow
from psych_runtime.workflows.client._follow import RecordFollower
from psych_runtime.workflows.contract._contract import RecordsQuery

from ..serve._app import ACME_KEY, KEYS, bearer
from ._short_reads import SHORT_LONG_POLL
from ._waiting import eventually
from .conftest import Harness
from .test_reads_bounded import relayed_client

pytestmark = pytest.mark.e2e

HISTORY = "GetWorkflowExecutionHistory"
BOUND = SHORT_LONG_POLL.total_seconds() + 15
"""How long a test waits for a long poll that should end within ``SHORT_LONG_POLL``."""


async def _waiting_run(harness: Harness) -> str:
    """A Run that asked a question and waits for its answer (its execution open, its
    history still: nothing is written until it is answered); its workflow id. The
    harness's worker must run while it is followed (a follower's records are a query)."""
    spec = (
        AgentBuilder(f"longpoll{uuid.uuid4().hex[:8]}")
        .model("fake-model")
        .suspension(may_ask_questions=True)
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("ask_question", {"question": "Which day?"}, id="q1"))
    )
    run = await harness.client.dispatch(spec, "go", scope=harness.scope)

    async def asking() -> bool:
        state = await harness.client.status(run, scope=harness.scope)
        return state.status is RunStatus.SUSPENDED

    await eventually(asking, what="the Run to ask")
    return run.workflow_id


async def _read(items: AsyncIterator[object], seconds: float, into: list[object]) -> None:
    """Read ``items`` into ``into`` to their end, ``seconds`` at most."""
    async with asyncio.timeout(seconds):
        async for item in items:
            into.append(item)


def _says_temporal(err: TemporalUnanswered, what: str, workflow_id: str) -> None:
    assert err.why.startswith(
        f"Temporal did not answer {what} of Run {workflow_id} within "
        f"{SHORT_LONG_POLL.total_seconds():g} s ("
    ), err.why
    problem = problem_of(err)
    assert problem is not None
    assert (problem.status, problem.kind, problem.detail) == (503, "temporal", err.why)


@pytest.mark.timeout(150)
@pytest.mark.usefixtures("short_long_polls")
async def test_a_followers_long_poll_not_answered_says_so(harness: Harness) -> None:
    async with harness.worker():
        workflow_id = await _waiting_run(harness)
        async with relayed_client(harness) as (relay, client):
            # The history as it is (the first page) is answered; the wait for what comes
            # next is held.
            relay.hang(HISTORY, after=1)
            follower = RecordFollower(client.temporal, workflow_id)
            seen: list[object] = []
            started = time.monotonic()
            with pytest.raises(HistoryNotRead) as unread:
                await _read(follower.records(), BOUND, seen)
            assert time.monotonic() - started < BOUND - 5
            assert seen, "the records written before the wait are read"
            assert relay.held == [HISTORY]
            _says_temporal(unread.value, "a page of the history", workflow_id)
            assert unread.value.events_read > 0
            assert f"after {unread.value.events_read} events read: " in unread.value.why

            # A REST event stream of the Run ends with it, as a 503 ``temporal`` event.
            relay.held.clear()
            relay.hang(HISTORY, after=1)
            settings = ServeSettings(client, AuthSettings(KEYS), query_timeout_seconds=5.0)
            transport = httpx.ASGITransport(app=create_app(settings))
            async with httpx.AsyncClient(transport=transport, base_url="http://api.test") as http:
                async with asyncio.timeout(BOUND):
                    answer = await http.get(
                        f"/v1/runs/{workflow_id}/events", headers=bearer(ACME_KEY)
                    )
    assert answer.status_code == 200
    events = [block for block in answer.text.split("\n\n") if block.strip()]
    last = dict(line.split(": ", 1) for line in events[-1].splitlines() if ": " in line)
    assert last["event"] == "error", answer.text
    problem = json.loads(last["data"])
    assert problem["type"].endswith("temporal")
    assert problem["detail"].startswith(
        f"Temporal did not answer a page of the history of Run {workflow_id} within "
        f"{SHORT_LONG_POLL.total_seconds():g} s (after "
    ), problem["detail"]


@pytest.mark.timeout(120)
@pytest.mark.usefixtures("short_long_polls")
async def test_a_close_events_long_poll_not_answered_says_so(
    harness: Harness,
) -> None:
    async with harness.worker():
        workflow_id = await _waiting_run(harness)

    async def never() -> AsyncIterator[str]:
        await asyncio.Event().wait()
        yield "never"

    async with relayed_client(harness) as (relay, client):
        relay.hang(HISTORY)
        started = time.monotonic()
        stream = until_closed(never(), client.temporal, workflow_id, grace=1.0)
        with pytest.raises(TemporalUnanswered) as unanswered:
            await _read(stream, BOUND, [])
        assert time.monotonic() - started < BOUND - 5
        assert relay.held == [HISTORY]
        _says_temporal(unanswered.value, "a long poll of the close event", workflow_id)

        # ``PsychClient.result`` waits for the same close event.
        started = time.monotonic()
        with pytest.raises(TemporalUnanswered) as waited:
            async with asyncio.timeout(BOUND):
                await client.result(workflow_id, scope=harness.scope)
        assert time.monotonic() - started < BOUND - 5
        assert relay.held == [HISTORY, HISTORY]
        _says_temporal(waited.value, "a long poll of the close event", workflow_id)


@pytest.mark.timeout(150)
async def test_a_long_poll_answered_empty_is_no_silence(harness: Harness) -> None:
    """Temporal answers a history long poll empty once nothing was written for its
    interval (``history.longPollExpirationInterval``, 20 s by default), or 1 s before the
    caller's deadline when that comes sooner. The relay does not pass the caller's deadline
    on (as a proxy may not), so here Temporal holds each poll its whole interval: a bound
    under it would take that empty answer for silence. With ``HISTORY_LONG_POLL_TIMEOUT``
    as it is, both watches of a Run that writes nothing are answered empty at 20 s, ask
    again and go on (checked failing with the bound set to 15 s)."""
    assert HISTORY_LONG_POLL_TIMEOUT.total_seconds() > 21
    async with harness.worker():
        workflow_id = await _waiting_run(harness)
        async with relayed_client(harness) as (relay, client):
            follower = RecordFollower(client.temporal, workflow_id)

            async def follow() -> None:
                async for _ in follower.records():
                    pass

            async def never() -> AsyncIterator[str]:
                await asyncio.Event().wait()
                yield "never"

            async def watch() -> None:
                async for _ in until_closed(never(), client.temporal, workflow_id, grace=5.0):
                    pass

            following = asyncio.create_task(follow())
            watching = asyncio.create_task(watch())
            try:
                await asyncio.sleep(24)
                assert not following.done(), following
                assert not watching.done(), watching
            finally:
                for task in (following, watching):
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
    # Each watch's first poll and its empty answer at 20 s, all answered.
    assert relay.of(HISTORY).count(grpc.StatusCode.OK) >= 3, relay.answered
    assert set(relay.of(HISTORY)) == {grpc.StatusCode.OK}, relay.answered


@pytest.mark.timeout(150)
@pytest.mark.usefixtures("short_long_polls")
async def test_a_watch_that_failed_while_records_were_read_page_by_page_is_raised(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watch's failure sets ``changed``, which the follower clears before each records
    query: one that failed while the follower read on page by page (more records than a
    page) was cleared unseen, and the follower, its records read, waited for a change that
    no watch would ever tell (checked: the read hung until its own timeout, TimeoutError)."""
    pages: list[int] = []

    def one_a_page(*, after: int = 0, limit: int = 1) -> RecordsQuery:
        pages.append(after)
        return RecordsQuery(after=after, limit=1)

    monkeypatch.setattr(_follow, "RecordsQuery", one_a_page)
    async with harness.worker():
        workflow_id = await _waiting_run(harness)
        async with relayed_client(harness) as (relay, client):
            relay.hang(HISTORY, after=1)
            follower = RecordFollower(client.temporal, workflow_id)
            seen: list[object] = []

            async def slowly() -> None:
                async for record in follower.records():
                    seen.append(record)
                    if len(seen) == 1:  # the watch's held poll runs out meanwhile
                        await asyncio.sleep(SHORT_LONG_POLL.total_seconds() + 3)

            with pytest.raises(HistoryNotRead):
                async with asyncio.timeout(BOUND + SHORT_LONG_POLL.total_seconds() + 3):
                    await slowly()
            assert relay.held == [HISTORY]
            assert len(seen) > 1, "records past the first page are read"
            assert len(pages) >= len(seen)
