"""Followers receive a model call's deltas live, from the worker's relay (issue 22).

Real dev server, real worker with its relay on loopback, the fake model streaming chunks
at a pace: a follower in another process gets text and tool-call pieces whose
concatenation is the recorded answer, before the call's record; a failed attempt, or one
whose worker is killed (its relay with it), is dropped; a reconnect resumes without loss or
duplicates; the history of a followed Run is the history of one nobody followed; and
``psych follow`` on a terminal shows the text while it is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
from collections.abc import Sequence
from typing import get_args

import pytest
from pydantic import TypeAdapter
from temporalio.client import Client

from psych_runtime.specs import AgentBuilder, AgentSpec, ToolRegistry
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers import follow_run
from psych_runtime.workers._live import LiveSettings
from psych_runtime.workflows import (
    Delta,
    DeltasDropped,
    ModelCallFailed,
    ModelCallFinished,
    PsychClient,
    Record,
    RunSettled,
    TokenDelta,
)
from psych_runtime.workflows.kernel._model_lost import MODEL_LOST_AFTER

from ._crash import doomed_worker
from ._delta_follower import spawn_follower
from ._worker_proc import REGISTRY
from .conftest import Harness

pytestmark = pytest.mark.e2e

FOLLOW_WITHIN = 60.0
PACE = 0.04
"""Seconds between the fake model's chunks: slow enough that a follower sees the call live."""
ANSWER = "Order 42 was delivered on Tuesday, left with the neighbour at number 7. " * 2
ITEMS: TypeAdapter[Record | Delta] = TypeAdapter(Record | Delta)
RECORD_TYPES = get_args(get_args(Record)[0])
"""The record classes (``Record`` is an annotated union of them)."""


def agent(registry: ToolRegistry) -> AgentSpec:
    @registry.register
    def lookup(order_id: str) -> str:
        """Look an order up."""
        return f"order {order_id}: delivered"

    return AgentBuilder("looker", registry=registry).model("fake-model").tool("lookup").build()


def script(harness: Harness) -> None:
    harness.fake.enqueue(
        Reply.tool_calls(
            ToolCall("lookup", {"order_id": "42", "note": "the one from last week"}),
            content="Let me look.",
            chunk_seconds=PACE,
        ),
        Reply.text(ANSWER, chunk_size=6, chunk_seconds=PACE),
    )


async def follow(client: PsychClient, harness: Harness, run: str, **kw: object) -> list[object]:
    async with asyncio.timeout(FOLLOW_WITHIN):
        return [
            item
            async for item in client.stream(run, scope=harness.scope, deltas=True, **kw)  # type: ignore[call-overload]  # kw: after, after_delta
        ]


def calls_of(items: Sequence[object]) -> dict[str, list[TokenDelta]]:
    by_call: dict[str, list[TokenDelta]] = {}
    for item in items:
        if isinstance(item, TokenDelta):
            by_call.setdefault(item.call, []).append(item)
    return by_call


def assert_pieces_match_records(items: Sequence[object]) -> None:
    """Each finished call's pieces, all before its record, concatenate to what it recorded."""
    dropped = {item.call for item in items if isinstance(item, DeltasDropped)}
    seen: list[TokenDelta] = []
    finished = 0
    for item in items:
        if isinstance(item, TokenDelta) and item.call not in dropped:
            seen.append(item)
        elif isinstance(item, ModelCallFinished):
            finished += 1
            assert seen, f"no pieces before the record of turn {item.turn}"
            assert {piece.turn for piece in seen} == {item.turn}
            assert len({piece.call for piece in seen}) == 1
            assert [piece.n for piece in seen] == list(range(1, len(seen) + 1))
            assert "".join(piece.text for piece in seen) == item.text
            for index, call in enumerate(item.tool_calls):
                parts = [p.tool_call for p in seen if p.tool_call and p.tool_call.index == index]
                assert "".join(part.arguments for part in parts) == call["arguments"]
                assert [part.name for part in parts if part.name] == [call["name"]]
                assert [part.id for part in parts if part.id] == [call["id"]]
            seen = []
    assert finished == 2
    assert isinstance(items[-1], RunSettled)


async def test_a_follower_in_another_process_gets_text_and_tool_call_deltas(
    harness: Harness,
) -> None:
    spec = agent(harness.registry)
    script(harness)
    target = harness.env.client.service_client.config.target_host
    follower = await spawn_follower(target, harness.settings.task_queue)
    try:
        async with harness.worker():
            run = await harness.client.dispatch(spec, "where is order 42?", scope=harness.scope)
            assert follower.stdin is not None and follower.stdout is not None
            follower.stdin.write(run.workflow_id.encode() + b"\n")
            await follower.stdin.drain()
            async with asyncio.timeout(FOLLOW_WITHIN):
                out = await follower.stdout.read()
                assert await follower.wait() == 0
    finally:
        if follower.returncode is None:
            follower.kill()
            await follower.wait()
    items = [ITEMS.validate_json(line) for line in out.decode().splitlines()]
    assert not any(isinstance(item, DeltasDropped) for item in items)
    assert_pieces_match_records(items)
    pieces = calls_of(items)
    assert len(pieces) == 2
    # Streamed as the provider sent it: many pieces per call, not one whole answer.
    assert all(len(call) > 5 for call in pieces.values())


async def test_the_history_of_a_followed_run_is_that_of_an_unfollowed_one(
    harness: Harness,
) -> None:
    spec = agent(harness.registry)
    async with harness.worker():
        script(harness)
        followed = await harness.client.dispatch(spec, "order 42?", scope=harness.scope)
        items = await follow(harness.client, harness, followed.workflow_id)
        script(harness)
        alone = await harness.client.dispatch(spec, "order 42?", scope=harness.scope)
        await harness.client.result(alone, scope=harness.scope)
    assert_pieces_match_records(items)
    assert await event_types(harness.env.client, followed.workflow_id) == await event_types(
        harness.env.client, alone.workflow_id
    )


async def test_a_shared_follower_forgets_the_pieces_every_stream_has_read(
    harness: Harness,
) -> None:
    spec = agent(harness.registry)
    items: list[object] = []
    async with harness.worker():
        script(harness)
        run = await harness.client.dispatch(spec, "order 42?", scope=harness.scope)
        async with asyncio.timeout(FOLLOW_WITHIN):
            async for item in harness.client.stream(run, scope=harness.scope, deltas=True):
                items.append(item)
                if isinstance(item, RunSettled):
                    # Still streaming: both calls ended and this stream read past them.
                    kept = harness.client.follows._runs[run.workflow_id].items
                    assert not [k for k in kept if isinstance(k, TokenDelta | DeltasDropped)]
    assert_pieces_match_records(items)
    assert len(calls_of(items)) == 2


async def test_a_stream_behind_the_others_still_gets_every_piece(harness: Harness) -> None:
    spec = agent(harness.registry)
    joined, ahead_done = asyncio.Event(), asyncio.Event()

    async def read(workflow_id: str, behind: bool) -> list[object]:
        got: list[object] = []
        stream = harness.client.stream(workflow_id, scope=harness.scope, deltas=True)
        async for item in stream:
            got.append(item)
            if behind and len(got) == 1:
                joined.set()
                await ahead_done.wait()  # joined before the calls, reads after they ended
        if not behind:
            ahead_done.set()
        return got

    async with harness.worker():
        script(harness)
        run = await harness.client.dispatch(spec, "order 42?", scope=harness.scope)
        async with asyncio.timeout(FOLLOW_WITHIN):
            slow = asyncio.ensure_future(read(run.workflow_id, behind=True))
            await joined.wait()
            ahead = await read(run.workflow_id, behind=False)
            behind = await slow
    for items in (ahead, behind):
        assert_pieces_match_records(items)
        assert len(calls_of(items)) == 2


async def event_types(client: Client, workflow_id: str) -> list[int]:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return [event.event_type for event in history.events]


async def test_a_failed_attempt_is_dropped_and_the_retry_streams_whole(harness: Harness) -> None:
    spec = AgentBuilder("talker", registry=harness.registry).model("fake-model").build()
    harness.fake.enqueue(
        Reply.abort(after_chunks=4, chunk_seconds=PACE),
        Reply.text(ANSWER, chunk_size=6, chunk_seconds=PACE),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "talk", scope=harness.scope)
        items = await follow(harness.client, harness, run.workflow_id)
    (dropped,) = [item for item in items if isinstance(item, DeltasDropped)]
    (failed,) = [item for item in items if isinstance(item, ModelCallFailed)]
    assert failed.transient
    # The dropped attempt's pieces and its drop come before the failure's record.
    assert items.index(dropped) < items.index(failed)
    partial = calls_of(items)[dropped.call]
    assert "".join(piece.text for piece in partial).startswith("partial partial")
    # What a view shows: drop a dropped attempt's text, replace pieces by the record.
    shown = "".join(
        item.text for item in items if isinstance(item, TokenDelta) and item.call != dropped.call
    )
    (finished,) = [item for item in items if isinstance(item, ModelCallFinished)]
    assert shown == finished.text == ANSWER


async def test_a_reconnect_resumes_after_the_last_piece_without_loss_or_duplicates(
    harness: Harness,
) -> None:
    spec = AgentBuilder("talker", registry=harness.registry).model("fake-model").build()
    long_answer = ANSWER * 3
    harness.fake.enqueue(Reply.text(long_answer, chunk_size=6, chunk_seconds=PACE))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "talk", scope=harness.scope)
        first: list[object] = []
        async with asyncio.timeout(FOLLOW_WITHIN):
            async for item in harness.client.stream(run, scope=harness.scope, deltas=True):
                first.append(item)
                if sum(isinstance(i, TokenDelta) for i in first) == 5:
                    break  # the connection is lost here
        last_seq = max(item.seq for item in first if isinstance(item, RECORD_TYPES))
        last = first[-1]
        assert isinstance(last, TokenDelta)
        # Another client: its own follower, its own relay connection.
        again = PsychClient(
            harness.env.client, store=harness.client.store, task_queue=harness.settings.task_queue
        )
        rest = await follow(
            again, harness, run.workflow_id, after=last_seq, after_delta=(last.call, last.n)
        )
    pieces = [i for i in [*first, *rest] if isinstance(i, TokenDelta)]
    assert [p.n for p in pieces] == list(range(1, len(pieces) + 1))
    (finished,) = [item for item in rest if isinstance(item, ModelCallFinished)]
    assert "".join(p.text for p in pieces) == finished.text == long_answer
    assert next(r.seq for r in rest if isinstance(r, RECORD_TYPES)) == last_seq + 1


async def test_a_worker_without_a_relay_offers_no_deltas(harness: Harness) -> None:
    spec = AgentBuilder("talker", registry=harness.registry).model("fake-model").build()
    harness.fake.enqueue(Reply.text(ANSWER, chunk_size=6, chunk_seconds=0.01))
    harness.settings = dataclasses.replace(harness.settings, live=LiveSettings(listen="off"))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "talk", scope=harness.scope)
        items = await follow(harness.client, harness, run.workflow_id)
    assert not any(isinstance(item, TokenDelta | DeltasDropped) for item in items)
    assert isinstance(items[-1], RunSettled)


async def test_psych_follow_shows_the_text_being_written_on_a_terminal(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dropped attempt's text is shown only by the live view (its record carries none)."""
    for name in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "TERM"):
        monkeypatch.delenv(name, raising=False)
    spec = AgentBuilder("talker", registry=harness.registry).model("fake-model").build()
    harness.fake.enqueue(
        Reply.abort(after_chunks=6, chunk_seconds=0.1),
        Reply.text(ANSWER, chunk_size=6, chunk_seconds=PACE),
    )
    leader, follower = os.openpty()
    shown = bytearray()

    def drain() -> None:
        with contextlib.suppress(OSError):
            while chunk := os.read(leader, 65536):
                shown.extend(chunk)

    reader = asyncio.get_running_loop().run_in_executor(None, drain)
    with os.fdopen(follower, "w", encoding="utf-8") as terminal:
        async with harness.worker():
            run = await harness.client.dispatch(spec, "talk", scope=harness.scope)
            async with asyncio.timeout(FOLLOW_WITHIN):
                report = await follow_run(harness.client, run, scope=harness.scope, out=terminal)
    os.close(leader)
    await reader
    assert report.answer == ANSWER
    text = shown.decode(errors="replace")
    assert "partial partial" in text  # the failed attempt's text, while it was written
    assert "connection dropped mid-response" in text  # its record's line


@pytest.mark.timeout(300)
async def test_a_lost_worker_drops_its_attempt_and_the_next_one_streams(harness: Harness) -> None:
    """The relay dies with its worker: the cut connection is a drop, not an answer."""
    long_answer = ANSWER * 4
    harness.fake.enqueue(
        Reply.text(long_answer, chunk_size=6, chunk_seconds=0.1),
        Reply.text(ANSWER, chunk_size=6, chunk_seconds=PACE),
    )
    queue = harness.settings.task_queue
    async with doomed_worker(
        harness.env.client, queue, harness.home, harness.fake.base_url
    ) as doomed:
        spec = AgentBuilder("talker", registry=REGISTRY).model("fake-model").build()
        run = await doomed.psych.dispatch(spec, "talk", scope=harness.scope)
        items: list[object] = []
        dropping = asyncio.Event()

        async def read() -> None:
            async for item in doomed.psych.stream(run, scope=harness.scope, deltas=True):
                items.append(item)
                if isinstance(item, DeltasDropped):
                    dropping.set()

        reader = asyncio.create_task(read())
        await doomed.kill_when(lambda: sum(isinstance(i, TokenDelta) for i in items) >= 3)
        # At once, not after the model call's heartbeat timeout (MODEL_LOST_AFTER).
        async with asyncio.timeout(10):
            await dropping.wait()
        async with doomed.survivor():
            async with asyncio.timeout(FOLLOW_WITHIN + MODEL_LOST_AFTER.total_seconds()):
                await reader
    (dropped,) = [item for item in items if isinstance(item, DeltasDropped)]
    assert "relay" in dropped.reason
    (finished,) = [item for item in items if isinstance(item, ModelCallFinished)]
    shown = "".join(i.text for i in items if isinstance(i, TokenDelta) and i.call != dropped.call)
    assert shown == finished.text == ANSWER
