"""The worker's delta hub and its relay, over real loopback HTTP."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import gc
import json
import weakref
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from temporalio.testing import ActivityEnvironment

from psych_runtime.activities.blobs import LocalBlobStore
from psych_runtime.activities.contract import RelayLine
from psych_runtime.activities.live import DeltaHub, DeltaRelay, parse_listen
from psych_runtime.activities.model import Endpoint, ModelActivities, ModelEndpoints
from psych_runtime.activities.model import _wire as wire
from psych_runtime.testing import FakeModel, Reply
from tests.activities._calls import MODEL, call

KEEP_SECONDS = 1.0


@pytest.fixture
async def relay() -> AsyncIterator[DeltaRelay]:
    # Long enough for a read right after an attempt ends on a loaded machine (0.2 s was
    # not, in CI with three pytest processes beside reviewers' runs: a 404).
    async with DeltaRelay(DeltaHub(keep_seconds=KEEP_SECONDS)) as running:
        yield running


async def lines(url: str, after: int = 0) -> list[RelayLine]:
    async with (
        httpx.AsyncClient() as http,
        http.stream("GET", url, params={"after": after}) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/x-ndjson"
        return [
            RelayLine.model_validate_json(line) async for line in response.aiter_lines() if line
        ]


async def test_a_follower_reads_pieces_live_from_any_point_to_the_end(relay: DeltaRelay) -> None:
    attempt = relay.hub.open("act-1#1")
    assert attempt.details.call == "act-1#1"
    assert attempt.details.url.startswith(f"http://127.0.0.1:{relay.port}/deltas/")
    attempt.text("Hel")
    live = asyncio.create_task(lines(attempt.details.url))
    resumed = asyncio.create_task(lines(attempt.details.url, after=2))
    await asyncio.sleep(0.05)
    assert not live.done()  # held open until the attempt ends
    attempt.text("lo")
    attempt.tool_call(0, "call_1", "lookup", '{"id"')
    attempt.tool_call(0, None, None, ": 1}")
    attempt.end("completed")
    got = await live
    assert [(line.n, line.text) for line in got[:2]] == [(1, "Hel"), (2, "lo")]
    assert (got[2].tool_index, got[2].tool_id, got[2].tool_name) == (0, "call_1", "lookup")
    assert "".join(line.tool_arguments for line in got) == '{"id": 1}'
    assert got[-1].end == "completed"
    assert [line.n for line in await resumed] == [3, 4, 0]
    # Ended attempts stay readable a while (a late follower), then are forgotten.
    assert [line.n for line in await lines(attempt.details.url, after=3)] == [4, 0]
    async with httpx.AsyncClient() as http:
        for _ in range(100):  # forgotten after KEEP_SECONDS: 10 s at most to see it
            gone = await http.get(attempt.details.url)
            if gone.status_code == 404:
                break
            await asyncio.sleep(0.1)
    assert gone.status_code == 404
    assert "unknown token" in gone.json()["error"]


async def test_a_failed_attempt_ends_failed_with_its_reason(relay: DeltaRelay) -> None:
    attempt = relay.hub.open("act-2#1")
    attempt.text("partial ")
    attempt.end("failed", "the stream ended before the response finished")
    attempt.text("ignored once ended")
    attempt.end("completed")  # the first end wins
    got = await lines(attempt.details.url)
    assert [(line.n, line.text, line.end) for line in got] == [
        (1, "partial ", None),
        (0, "", "failed"),
    ]
    assert got[-1].reason == "the stream ended before the response finished"


async def test_tokens_are_per_attempt_and_unguessable(relay: DeltaRelay) -> None:
    first, second = relay.hub.open("a#1"), relay.hub.open("a#2")
    assert first.details.url != second.details.url
    token = first.details.url.rsplit("/", 1)[1]
    assert len(token) >= 24
    async with httpx.AsyncClient() as http:
        base = relay.url
        # One character off (never the same one: a token may end in it already).
        wrong = token[:-1] + ("y" if token.endswith("x") else "x")
        assert (await http.get(f"{base}/deltas/{wrong}")).status_code == 404
        assert (await http.get(f"{base}/other")).status_code == 404
        # Not ASCII digits, or too many for a line count: refused, not a dropped connection.
        for after in ("-1", "\u00b2", "9" * 5000):
            bad = await http.get(first.details.url, params={"after": after})
            assert bad.status_code == 400 and "after must be" in bad.json()["error"]
        assert (await http.post(first.details.url)).status_code == 405


class _Activity:
    """Stands for what an activity's context holds (its SDK context, events, ...)."""


_current: contextvars.ContextVar[_Activity | None] = contextvars.ContextVar("current")


async def test_an_ended_attempt_keeps_nothing_of_the_activity_that_ended_it() -> None:
    """Ending an attempt inside an activity must not hold that activity's context (a
    timer would) for the ``keep_seconds`` its pieces stay readable."""
    hub = DeltaHub(keep_seconds=30)
    attempt = hub.open("a#1")
    activity = _Activity()
    gone = weakref.ref(activity)

    def end(activity: _Activity) -> None:
        _current.set(activity)
        attempt.text("done")
        attempt.end("completed")

    contextvars.copy_context().run(end, activity)
    del activity
    gc.collect()
    assert gone() is None
    assert hub.get(attempt.token) is attempt  # still readable


async def test_too_many_pieces_end_the_attempt_failed_for_followers() -> None:
    hub = DeltaHub(max_pieces=3)
    async with DeltaRelay(hub):
        attempt = hub.open("a#1")
        for piece in "abcde":
            attempt.text(piece)
        got = await lines(attempt.details.url)
    assert [line.text for line in got[:3]] == ["a", "b", "c"]
    assert (got[-1].end, got[-1].reason) == ("failed", "more than 3 pieces")


async def test_pieces_are_written_as_lines_only_when_a_reader_reads_them() -> None:
    hub = DeltaHub()
    attempt = hub.open("a#1")
    attempt.text("Hel")
    attempt.tool_call(0, "c1", "lookup", "")
    attempt.tool_call(0, None, None, '{"q": 1}')
    attempt.end("completed")
    # Nobody has read the attempt: nothing was written (most attempts have no follower).
    assert not any(isinstance(line, bytes) for line in attempt.lines)
    read = [json.loads(line) async for line in attempt.read(0)]
    assert read == [
        {"n": 1, "text": "Hel"},
        {"n": 2, "tool_index": 0, "tool_id": "c1", "tool_name": "lookup"},
        {"n": 3, "tool_index": 0, "tool_arguments": '{"q": 1}'},
        {"end": "completed"},
    ]
    assert all(isinstance(line, bytes) for line in attempt.lines)  # written once


async def test_a_piece_utf8_cannot_hold_is_read_replaced_and_the_end_still_follows() -> None:
    hub = DeltaHub()
    attempt = hub.open("a#1")
    attempt.text("ok")
    attempt.text("\ud83d")  # half of a surrogate pair a provider split across two chunks
    attempt.end("failed", "boom")
    read = [json.loads(line) async for line in attempt.read(0)]
    assert read == [
        {"n": 1, "text": "ok"},
        {"n": 2, "text": "?"},
        {"end": "failed", "reason": "boom"},
    ]


async def test_stopping_the_relay_cuts_open_streams_without_an_end() -> None:
    hub = DeltaHub()
    relay = DeltaRelay(hub)
    await relay.start()
    attempt = hub.open("a#1")
    attempt.text("x")
    received: list[str] = []
    first = asyncio.Event()

    async def read() -> None:
        async with (
            httpx.AsyncClient() as http,
            http.stream("GET", attempt.details.url) as response,
        ):
            async for line in response.aiter_lines():
                received.append(line)
                first.set()

    reader = asyncio.create_task(read())
    async with asyncio.timeout(10):
        await first.wait()  # the first piece has reached the follower
    await relay.stop()
    with pytest.raises(httpx.HTTPError):
        await reader
    assert [json.loads(line)["n"] for line in received] == [1]
    assert not hub.serving


def test_listen_addresses_are_checked() -> None:
    assert parse_listen("0.0.0.0:7280") == ("0.0.0.0", 7280)
    assert parse_listen("[::1]:0") == ("::1", 0)
    for bad in ("7280", "host:", ":80", "host:99999", "host:port"):
        with pytest.raises(ValueError, match="must be host:port"):
            parse_listen(bad)


def test_a_hub_without_a_relay_offers_no_address() -> None:
    hub = DeltaHub()
    assert not hub.serving
    with pytest.raises(RuntimeError, match="no relay"):
        hub.url_of("token")


async def test_a_call_offers_its_deltas_address_once_it_has_run_a_moment(
    blobs: LocalBlobStore, http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A beat is a server round trip: a call over before anyone could follow it live sends
    # none; a longer one sends the relay's address after LIVE_FIRST_BEAT_SECONDS.
    hub = DeltaHub()
    hub.base_url = "http://127.0.0.1:7280"  # where a relay would serve it; none is needed
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=60))
    beats: list[tuple[Any, ...]] = []
    env.on_heartbeat = lambda *details: beats.append(details)
    async with FakeModel(models=(MODEL,)) as fake:
        acts = ModelActivities(
            endpoints=ModelEndpoints(default=Endpoint(fake.base_url, "key")),
            blobs=blobs,
            http=http,
            live=hub,
        )
        monkeypatch.setattr(wire, "LIVE_FIRST_BEAT_SECONDS", 30.0)
        fake.enqueue(Reply.text("quick"))
        await env.run(acts.complete, call(), deltas=hub.open("quick#1"))
        assert beats == []

        monkeypatch.setattr(wire, "LIVE_FIRST_BEAT_SECONDS", 0.05)
        fake.enqueue(Reply.text("a slower answer", chunk_size=3, chunk_seconds=0.1))
        slow = hub.open("slow#1", turn=1)
        result = await env.run(acts.complete, call(), deltas=slow)
    assert result.text == "a slower answer"
    assert beats == [(slow.details,)]  # one: the next waits a third of the timeout
