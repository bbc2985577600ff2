"""The model activity's per-call work beyond the request (issue 27, item 2): the Run's
system prompt and tool list read once per worker (by ref), and the result's size bounded
without writing its JSON."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from temporalio.testing import ActivityEnvironment

from psych_runtime.activities.blobs import LocalBlobStore, RecentByRef
from psych_runtime.activities.contract import (
    Latency,
    ModelCallResult,
    ToolCallRequest,
    ToolDefinition,
    Usage,
)
from psych_runtime.activities.model import Endpoint, ModelActivities, ModelEndpoints
from psych_runtime.activities.model._failures import MAX_RESULT_BYTES, surely_fits
from psych_runtime.testing import FakeModel, Reply
from tests.activities._calls import MODEL, call

KEY = "sk-test-key"
WEATHER = ToolDefinition(
    name="get_weather",
    description="Weather in a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)


class CountingBlobs(LocalBlobStore):
    """A LocalBlobStore that counts its reads by ref."""

    def __init__(self, root: Any) -> None:
        super().__init__(root)
        self.reads: dict[str, int] = {}

    async def get(self, ref: str) -> bytes:
        self.reads[ref] = self.reads.get(ref, 0) + 1
        return await super().get(ref)


def _activities(
    fake: FakeModel, tmp_path: Any, http: httpx.AsyncClient
) -> tuple[ModelActivities, CountingBlobs]:
    blobs = CountingBlobs(tmp_path / "blobs")
    acts = ModelActivities(
        endpoints=ModelEndpoints(default=Endpoint(fake.base_url, KEY)), blobs=blobs, http=http
    )
    return acts, blobs


@pytest.fixture
async def fake() -> AsyncIterator[FakeModel]:
    async with FakeModel(models=(MODEL,)) as model:
        yield model


async def test_the_system_prompt_and_tool_list_are_read_once_per_worker(
    fake: FakeModel, tmp_path: Any, http: httpx.AsyncClient
) -> None:
    acts, blobs = _activities(fake, tmp_path, http)
    system_ref = await blobs.put(b"Stored prompt.")
    tools_ref = await blobs.put(json.dumps([WEATHER.model_dump(mode="json")]).encode())
    fake.enqueue(Reply.text("one"), Reply.text("two"), Reply.text("three"))
    env = ActivityEnvironment()
    for turn in (1, 2):
        await env.run(acts.complete, call(turn=turn, system_ref=system_ref, tools_ref=tools_ref))
    # A third call excludes the tool: the kept list is filtered, not changed.
    await env.run(
        acts.complete,
        call(turn=3, system_ref=system_ref, tools_ref=tools_ref, exclude_tools=("get_weather",)),
    )
    assert blobs.reads[system_ref] == 1
    assert blobs.reads[tools_ref] == 1
    for request in fake.requests:
        assert request["messages"][0] == {"role": "system", "content": "Stored prompt."}
    assert [t["function"]["name"] for t in fake.requests[1]["tools"]] == ["get_weather"]
    assert "tools" not in fake.requests[2]


async def test_an_inline_system_prompt_is_kept_by_the_ref_it_is_stored_under(
    fake: FakeModel, tmp_path: Any, http: httpx.AsyncClient
) -> None:
    acts, blobs = _activities(fake, tmp_path, http)
    fake.enqueue(Reply.text("one"), Reply.text("two"))
    env = ActivityEnvironment()
    first = await env.run(acts.complete, call(system_prompt="Be brief."))
    assert first.system_ref is not None
    await env.run(acts.complete, call(turn=2, system_ref=first.system_ref))
    assert first.system_ref not in blobs.reads
    assert fake.requests[1]["messages"][0] == {"role": "system", "content": "Be brief."}


def test_by_ref_keeps_the_most_recently_used() -> None:
    kept: RecentByRef[str] = RecentByRef(max_bytes=32)  # room for two values of 16
    kept.keep_sized("a", "A", 2)
    kept.keep_sized("b", "B", 2)
    assert kept.get("a") == "A"  # now the most recently used
    kept.keep_sized("c", "C", 30)  # above a sixteenth of 32: not kept
    assert kept.get("c") is None
    kept = RecentByRef(max_bytes=64)
    kept.keep_sized("a", "A", 4)
    kept.keep_sized("b", "B", 4)
    assert kept.get("a") == "A"
    for i in range(15):
        kept.keep_sized(f"x{i}", "X", 4)
    assert (kept.get("a"), kept.get("b"), kept.get("x14")) == ("A", None, "X")
    assert len(kept) == 16
    with pytest.raises(ValueError, match="max_bytes must be 0 or more, not -1"):
        RecentByRef(max_bytes=-1)


def test_by_ref_is_bounded_in_bytes_too() -> None:
    kept: RecentByRef[str] = RecentByRef(max_bytes=1600)
    for name in "abcd":
        kept.keep_sized(name, name.upper(), 100)
    assert kept.kept_bytes == 400
    kept.get("a")
    kept.keep_sized("b", "B2", 60)  # a keep again replaces, and its bytes are counted once
    assert (kept.get("b"), kept.kept_bytes) == ("B2", 360)
    for i in range(15):
        kept.keep_sized(f"x{i}", "X", 100)
    # 1600 bytes at most: the least recently used went first (c, d, then a)
    assert [kept.get(n) for n in "abcd"] == [None, "B2", None, None]
    assert kept.kept_bytes == 1560
    kept.keep_sized("huge", "H", 101)  # above a sixteenth of the bound: not kept
    assert kept.get("huge") is None
    assert len(kept) == 16


async def test_a_tool_list_above_the_bound_is_read_each_call_and_sent_whole(
    fake: FakeModel, tmp_path: Any, http: httpx.AsyncClient
) -> None:
    acts, blobs = _activities(fake, tmp_path, http)
    tools_json = json.dumps([WEATHER.model_dump(mode="json")]).encode()
    acts._tool_lists = RecentByRef(max_bytes=16 * (len(tools_json) - 1))
    acts._tools_json = RecentByRef(max_bytes=16 * (len(tools_json) - 1))
    tools_ref = await blobs.put(tools_json)
    fake.enqueue(Reply.text("one"), Reply.text("two"))
    env = ActivityEnvironment()
    for turn in (1, 2):
        await env.run(acts.complete, call(turn=turn, tools_ref=tools_ref))
    assert blobs.reads[tools_ref] == 2
    assert (len(acts._tool_lists), len(acts._tools_json)) == (0, 0)
    assert fake.requests[0]["tools"] == fake.requests[1]["tools"]
    assert [t["function"]["name"] for t in fake.requests[1]["tools"]] == ["get_weather"]


def _result(text: str, *, arguments: str = "{}") -> ModelCallResult:
    return ModelCallResult(
        model=MODEL,
        system_ref=None,
        context_ref="sha256:" + "0" * 64,
        text=text,
        tool_calls=(ToolCallRequest(id="call_1", name="get_weather", arguments=arguments),),
        usage=Usage(input_tokens=10**9, output_tokens=10**9),
        cost=123456.789,
        latency=Latency(queue_wait_ms=1e12, duration_ms=1e12, first_token_ms=1e12),
    )


@pytest.mark.parametrize("char", ["x", "\x01", '"', "é", "\U0001f600"])
def test_the_size_bound_is_never_below_the_json(char: str) -> None:
    # The most text the bound lets through unmeasured, in the character whose JSON is
    # longest of its kind: its JSON is still within the limit.
    size = 1
    while surely_fits(_result(char * (size * 2), arguments=char * (size * 2))):
        size *= 2
    low, high = size, size * 2
    while high - low > 1:
        middle = (low + high) // 2
        fits = surely_fits(_result(char * middle, arguments=char * middle))
        low, high = (middle, high) if fits else (low, middle)
    result = _result(char * low, arguments=char * low)
    assert surely_fits(result)
    assert len(result.model_dump_json().encode()) <= MAX_RESULT_BYTES


def test_a_result_near_the_limit_is_measured_whole() -> None:
    assert surely_fits(_result("short answer"))
    assert not surely_fits(_result("x" * (MAX_RESULT_BYTES // 6)))
