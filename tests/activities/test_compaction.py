"""The summariser activity and the thread prefix, in an activity context against the
loopback fake model."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from psych_runtime.activities.blobs import LocalBlobStore
from psych_runtime.activities.contract import (
    MODEL_CALL_FAILED,
    ChatMessage,
    CompactInput,
    ErrorType,
    ModelCallInput,
    ThreadContext,
    ToolCallRequest,
    TurnMark,
)
from psych_runtime.activities.model import (
    SUMMARISER_PROMPT,
    CompactionActivities,
    Endpoint,
    ModelActivities,
    ModelEndpoints,
    ModelPrice,
    TablePricing,
)
from psych_runtime.activities.model._compaction import SUMMARY_HEADER, transcript, unpaired
from psych_runtime.activities.model._threads import bounded, chain_nodes, thread_head
from psych_runtime.specs import ModelRef, Scope
from psych_runtime.testing import FakeModel, Reply
from psych_runtime.testing import Usage as FakeUsage

MODEL = "fake-model"
SCOPE = Scope(tenant="acme")


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


def calls(*ids: str) -> ChatMessage:
    return ChatMessage(
        role="assistant",
        tool_calls=tuple(ToolCallRequest(id=i, name="lookup", arguments="{}") for i in ids),
    )


def result(call_id: str, text: str = "ok") -> ChatMessage:
    return ChatMessage(role="tool", content=text, tool_call_id=call_id)


def answer(text: str) -> ChatMessage:
    return ChatMessage(role="assistant", content=text)


@pytest.fixture
async def fake() -> AsyncIterator[FakeModel]:
    async with FakeModel(models=(MODEL, "tiny")) as model:
        yield model


@pytest.fixture
def model(fake: FakeModel, blobs: LocalBlobStore, http: httpx.AsyncClient) -> ModelActivities:
    return ModelActivities(
        endpoints=ModelEndpoints(default=Endpoint(fake.base_url, "k")),
        blobs=blobs,
        http=http,
        pricing=TablePricing({"tiny": ModelPrice(input=1.0, output=2.0)}),
    )


async def chain_of(model: ModelActivities, *nodes: list[ChatMessage]) -> list[str]:
    """Store ``nodes`` as a chain; the ref of each node, root first."""
    heads: list[str] = []
    head: str | None = None
    for messages in nodes:
        refs = [await model.conversations.put_message(m) for m in messages]
        head = await model.conversations.append(head, refs)
        assert head is not None
        heads.append(head)
    return heads


def compact_input(head: str, marks: tuple[TurnMark, ...], **fields: object) -> CompactInput:
    values: dict[str, object] = {
        "run_id": "r",
        "turn": 3,
        "model": "tiny",
        "params": ModelRef(model=MODEL, temperature=0.5),
        "context_ref": head,
        "marks": marks,
        "max_summary_tokens": 77,
        "scope": SCOPE,
    }
    values.update(fields)
    return CompactInput.model_validate(values)


async def test_compact_summarises_before_the_cut_and_keeps_the_rest_by_reference(
    fake: FakeModel, model: ModelActivities
) -> None:
    # Three turns: each node starts with the previous turn's tool results (the carry).
    _n1, n2, n3 = await chain_of(
        model,
        [user("Find order 42"), calls("c1")],
        [result("c1", "order 42: shipped"), calls("c2")],
        [result("c2", "carrier: DHL"), answer("It ships with DHL.")],
    )
    fake.enqueue(
        Reply.text("User wants order 42; it shipped.", usage=FakeUsage(input_tokens=90)),
        model="tiny",
    )
    marks = (TurnMark(node=n2, offset=1), TurnMark(node=n3, offset=1))
    done = await ActivityEnvironment().run(
        CompactionActivities(model).compact,
        compact_input(n3, marks, instructions="Keep order ids."),
    )
    # Turn 1 and turn 1's tool result are replaced; turns 2 and 3 are kept verbatim.
    assert done.replaced == 3
    assert done.model == "tiny"
    assert done.usage.input_tokens == 90
    assert done.cost is not None and done.cost > 0
    assert done.summary_preview == "User wants order 42; it shipped."
    # The summariser's own conversation is never called again: not kept among the heads.
    kept = model.conversations._cache.values()
    assert not any(messages[-1].content == "User wants order 42; it shipped." for messages in kept)
    seen = await model.conversations.messages(done.context_ref)
    assert seen[0].content == SUMMARY_HEADER + "User wants order 42; it shipped."
    assert [m.role for m in seen[1:]] == ["assistant", "tool", "assistant"]
    assert seen[1].tool_calls[0].id == "c2"
    assert await model.conversations.get_message(done.summary_ref) == seen[0]
    # The marks name the same turn starts in the new chain: turn 2 right after the summary.
    nodes = await chain_nodes(model.blobs, done.context_ref)
    assert [len(m) for _, m in nodes] == [1, 3]
    assert done.marks == (
        TurnMark(node=done.context_ref, offset=0),
        TurnMark(node=done.context_ref, offset=2),
    )
    # The summariser's request: its own prompt with the instructions, no tools, the cap.
    (request,) = fake.requests
    assert request["model"] == "tiny"
    assert request["messages"][0] == {
        "role": "system",
        "content": SUMMARISER_PROMPT + "\n\nKeep order ids.",
    }
    assert "tools" not in request
    assert request["max_completion_tokens"] == 77
    assert request["temperature"] == 0.5
    text = request["messages"][1]["content"]
    assert "Find order 42" in text and "order 42: shipped" in text
    assert "carrier: DHL" not in text


async def test_a_second_compaction_summarises_the_previous_summary_too(
    fake: FakeModel, model: ModelActivities
) -> None:
    _n1, n2 = await chain_of(
        model,
        [user(SUMMARY_HEADER + "Earlier: order 42."), user("And 43?"), calls("c9")],
        [result("c9", "43: lost"), answer("43 is lost.")],
    )
    fake.enqueue(Reply.text("Orders 42 and 43 discussed."), model="tiny")
    done = await ActivityEnvironment().run(
        CompactionActivities(model).compact,
        compact_input(n2, (TurnMark(node=n2, offset=1),)),
    )
    assert done.replaced == 4
    text = fake.requests[0]["messages"][1]["content"]
    assert text.startswith("[summary of what came before]\nEarlier: order 42.")
    seen = await model.conversations.messages(done.context_ref)
    assert [m.content for m in seen] == [
        SUMMARY_HEADER + "Orders 42 and 43 discussed.",
        "43 is lost.",
    ]


async def test_a_failed_summariser_call_is_the_model_calls_failure(
    fake: FakeModel, model: ModelActivities
) -> None:
    _n1, n2 = await chain_of(model, [user("a"), calls("c1")], [result("c1"), answer("b")])
    fake.enqueue(Reply.error(400, message="context too long"), model="tiny")
    with pytest.raises(ApplicationError) as failed:
        await ActivityEnvironment().run(
            CompactionActivities(model).compact, compact_input(n2, (TurnMark(node=n2, offset=1),))
        )
    assert failed.value.type == MODEL_CALL_FAILED
    assert "context too long" in failed.value.message


@pytest.mark.parametrize(
    ("node", "offset", "why"),
    [
        (None, 0, "is not a node of this conversation"),
        (2, 5, "is past its node"),
        (1, 0, "leaves nothing to summarise"),
        (2, 0, "the cut parts tool calls from their results: c1"),
    ],
)
async def test_a_cut_that_is_not_at_a_turn_start_is_refused(
    fake: FakeModel, model: ModelActivities, node: int | None, offset: int, why: str
) -> None:
    n1, n2 = await chain_of(model, [user("a"), calls("c1")], [result("c1"), answer("b")])
    ref = {1: n1, 2: n2}.get(node or 0, "sha256:" + "0" * 64)
    with pytest.raises(ApplicationError) as failed:
        await ActivityEnvironment().run(
            CompactionActivities(model).compact,
            compact_input(n2, (TurnMark(node=ref, offset=offset),)),
        )
    assert failed.value.type == ErrorType.COMPACTION_FAILED
    assert why in failed.value.message
    assert fake.requests == []


def test_unpaired_names_calls_whose_results_lie_past_the_cut() -> None:
    assert unpaired([user("a"), calls("c1", "c2"), result("c1")], [result("c2")]) is not None
    assert unpaired([user("a"), calls("c1"), result("c1")], [user("b")]) is None


def test_transcript_shows_calls_and_results() -> None:
    text = transcript([user("hi"), calls("c1"), result("c1", "42")])
    assert text == "[user]\nhi\n\n[assistant]\n[tool call lookup id=c1] {}\n\n[tool result c1]\n42"


EARLIER = [
    user("Order 42?"),
    calls("c1", "c2"),
    result("c1", "shipped"),
    result("c2", "DHL"),
    answer("Shipped with DHL."),
    user("Thanks"),
    answer("You're welcome."),
]


@pytest.mark.parametrize(
    ("limit", "window"),
    [
        (100, (0, 7)),
        (3, (4, 7)),
        # The last 4 start on a tool result whose call the bound cut off: it is dropped.
        (4, (4, 7)),
        (5, (4, 7)),
        (6, (1, 7)),
        (0, (7, 7)),
    ],
)
def test_bounded_never_starts_on_an_orphan_result(limit: int, window: tuple[int, int]) -> None:
    assert bounded(EARLIER, limit) == window


def test_bounded_ends_before_a_call_the_earlier_run_never_answered() -> None:
    stopped = [user("Order 42?"), calls("c1"), result("c1"), calls("c2", "c3"), result("c2")]
    assert bounded(stopped, 10) == (0, 3)


async def test_a_threaded_first_call_sees_the_earlier_conversation_by_reference(
    fake: FakeModel, model: ModelActivities
) -> None:
    (earlier,) = await chain_of(model, EARLIER)
    prefix = await thread_head(model.conversations, ThreadContext(head=earlier, max_messages=3))
    assert prefix is not None
    assert [m.content for m in await model.conversations.messages(prefix)] == [
        "Shipped with DHL.",
        "Thanks",
        "You're welcome.",
    ]
    fake.enqueue(Reply.text("Sure."))
    first = await ActivityEnvironment().run(
        model.complete,
        ModelCallInput(
            run_id="r2",
            turn=1,
            model=MODEL,
            params=ModelRef(model=MODEL),
            new_messages=(user("And order 43?"),),
            scope=SCOPE,
            thread=ThreadContext(head=earlier, max_messages=3),
        ),
    )
    sent = [m.get("content") for m in fake.requests[0]["messages"]]
    assert sent == ["Shipped with DHL.", "Thanks", "You're welcome.", "And order 43?"]
    # The Run's own chain continues the prefix, so later calls see it through their head.
    nodes = await chain_nodes(model.blobs, first.context_ref)
    assert nodes[0][0] == prefix


class SlowReads(LocalBlobStore):
    """A local store whose reads take ``delay`` seconds once ``slow`` is set: a long
    conversation read from a slow store."""

    slow = False
    delay = 0.3

    async def get(self, ref: str) -> bytes:
        if self.slow:
            await asyncio.sleep(self.delay)
        return await super().get(ref)


async def test_the_summariser_beats_while_it_reads_the_conversation(
    fake: FakeModel, tmp_path: Path, http: httpx.AsyncClient
) -> None:
    """The call's heartbeat timeout is the workflows worker's ``outage_seconds`` plus the
    margin, 10 s at 0: reading a long conversation from a slow store before the
    summariser's request (and storing the summary after it) must not look like a lost
    worker, as the model call's own reads do not."""
    blobs = SlowReads(tmp_path / "blobs")
    writer = ModelActivities(
        endpoints=ModelEndpoints(default=Endpoint(fake.base_url, "k")), blobs=blobs, http=http
    )
    _n1, n2, n3 = await chain_of(
        writer,
        [user("Find order 42"), calls("c1")],
        [result("c1", "order 42: shipped"), calls("c2")],
        [result("c2", "carrier: DHL"), answer("It ships with DHL.")],
    )
    fake.enqueue(Reply.text("Order 42 shipped."), model="tiny")
    # A fresh worker's activities: nothing of the chain in their cache, every read slow.
    model = ModelActivities(
        endpoints=ModelEndpoints(default=Endpoint(fake.base_url, "k")), blobs=blobs, http=http
    )
    blobs.slow = True
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=0.3))
    beats: list[float] = []
    env.on_heartbeat = lambda *_: beats.append(time.monotonic())
    marks = (TurnMark(node=n2, offset=1), TurnMark(node=n3, offset=1))
    started = time.monotonic()
    done = await env.run(CompactionActivities(model).compact, compact_input(n3, marks))
    ended = time.monotonic()
    assert done.replaced == 3
    # Beats every tenth of a second (a third of the timeout); the reads took seconds.
    assert ended - started > 1.5
    moments = [started, *beats, ended]
    gaps = [later - earlier for earlier, later in itertools.pairwise(moments)]
    assert max(gaps) < 1.0, gaps
