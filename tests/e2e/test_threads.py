"""Threads end to end on a real dev server: a Run continuing an earlier Run's conversation
within ``max_history_records``, by reference; another tenant's Run refused; ``next_run``
steering carrying the thread."""

from __future__ import annotations

import asyncio
import io
from typing import Any

import pytest

from psych_runtime.specs import AccessDenied, AgentBuilder, AgentSpec, NotFound, PsychError, Scope
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers.console import print_transcript, read_transcript
from psych_runtime.workflows import NextRunStarted, RunAdmitted, RunHandle, RunStatus

from .conftest import Harness

pytestmark = pytest.mark.e2e

# The earlier Run's conversation, as the model saw it (system prompt aside).
EARLIER = [
    ("user", "Where is order 42?"),
    ("assistant", None),  # the lookup_order call
    ("tool", "order 42: shipped"),
    ("assistant", "Order 42 has shipped."),
]


def spec(harness: Harness, name: str, max_history_records: int | None = None) -> AgentSpec:
    if "lookup_order" not in harness.registry.names():

        @harness.registry.register
        def lookup_order(order_id: str) -> str:
            """Look up an order.

            Args:
                order_id: The order's id.
            """
            return f"order {order_id}: shipped"

    builder = AgentBuilder(name, registry=harness.registry).model("fake-model").tool("lookup_order")
    if max_history_records is not None:
        builder = builder.limits(max_history_records=max_history_records)
    return builder.build()


def conversation(request: dict[str, Any]) -> list[tuple[str, str | None]]:
    """``(role, content)`` of a request's messages after the system prompt."""
    return [
        (m["role"], m.get("content") or None) for m in request["messages"] if m["role"] != "system"
    ]


async def earlier_run(harness: Harness) -> RunHandle:
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "42"})),
        Reply.text("Order 42 has shipped."),
    )
    run = await harness.client.dispatch(
        spec(harness, "first"), "Where is order 42?", scope=harness.scope
    )
    await harness.client.result(run, scope=harness.scope)
    return run


@pytest.mark.parametrize(
    ("bound", "seen"),
    [
        (300, EARLIER),
        (3, EARLIER[1:]),
        # The last two messages start on a tool result whose call the bound cut off: only
        # the answer is shown, never the result without its call.
        (2, EARLIER[3:]),
        (0, []),
    ],
    ids=["all", "three", "cut-between-call-and-result", "none"],
)
async def test_a_continued_thread_sees_the_earlier_conversation_within_the_bound(
    harness: Harness, bound: int, seen: list[tuple[str, str | None]]
) -> None:
    client = harness.client
    async with harness.worker():
        first = await earlier_run(harness)
        state = await client.status(first, scope=harness.scope)
        assert state.conversation_ref is not None
        harness.fake.enqueue(
            Reply.tool_calls(ToolCall("lookup_order", {"order_id": "43"})),
            Reply.text("Order 43 has shipped too."),
        )
        run = await client.dispatch(
            spec(harness, "second", bound),
            "And order 43?",
            scope=harness.scope,
            thread=first.workflow_id,
        )
        result = await client.result(run, scope=harness.scope)
        records = (await client.records(run, scope=harness.scope)).records
        report = await client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED
    first_call, second_call = harness.fake.requests[2:]
    assert conversation(first_call) == [*seen, ("user", "And order 43?")]
    # Later calls see the same prefix through the Run's own head.
    assert conversation(second_call)[: len(seen) + 1] == [*seen, ("user", "And order 43?")]
    (admitted,) = [r for r in records if isinstance(r, RunAdmitted)]
    assert admitted.thread is not None
    assert admitted.thread.run == first.workflow_id
    assert admitted.thread.head == state.conversation_ref
    assert report.thread == admitted.thread
    # By reference: no message of the earlier conversation is in this Run's history.
    history = await harness.env.client.get_workflow_handle(run.workflow_id).fetch_history()
    assert "order 42: shipped" not in history.to_json()


async def test_the_transcript_says_the_model_saw_the_earlier_runs_conversation_first(
    harness: Harness,
) -> None:
    # The earlier conversation reached the model by reference, not through this Run's
    # records: the transcript (the conversation as the model saw it) says where it went and
    # whose it is, rather than starting at this Run's input as if the model saw no more.
    client = harness.client
    async with harness.worker():
        first = await earlier_run(harness)
        harness.fake.enqueue(Reply.text("Order 43 has shipped too."))
        run = await client.dispatch(
            spec(harness, "second", 3), "And order 43?", scope=harness.scope, thread=first
        )
        await client.result(run, scope=harness.scope)
        transcript = await read_transcript(client, run, scope=harness.scope)
    assert conversation(harness.fake.requests[2]) == [*EARLIER[1:], ("user", "And order 43?")]
    assert transcript.thread == first.workflow_id
    note = (
        f"(here the model was first shown the end of the earlier Run {first.workflow_id}'s "
        "conversation, at most limits.max_history_records messages of it; they are that "
        f"Run's, not recorded here: psych report {first.workflow_id} --transcript)"
    )
    text, markdown = io.StringIO(), io.StringIO()
    print_transcript(transcript, text, markdown=False)
    print_transcript(transcript, markdown, markdown=True)
    lines = text.getvalue().splitlines()
    assert lines.index(f"── earlier conversation (thread of {first.workflow_id}) ──") == (
        lines.index("── user ──") - 3
    )
    assert f"## earlier conversation (thread of {first.workflow_id})\n\n*{note}*\n\n## user" in (
        markdown.getvalue()
    )
    assert note in lines


async def test_the_transcript_says_the_model_saw_none_of_the_thread_under_a_bound_of_0(
    harness: Harness,
) -> None:
    # max_history_records 0 shows the model nothing of the earlier conversation: the
    # transcript said it was first shown the end of it, and the record did not say otherwise.
    client = harness.client
    async with harness.worker():
        first = await earlier_run(harness)
        harness.fake.enqueue(Reply.text("Which order?"))
        run = await client.dispatch(
            spec(harness, "second", 0), "And order 43?", scope=harness.scope, thread=first
        )
        await client.result(run, scope=harness.scope)
        records = (await client.records(run, scope=harness.scope)).records
        transcript = await read_transcript(client, run, scope=harness.scope)
    assert conversation(harness.fake.requests[2]) == [("user", "And order 43?")]
    (admitted,) = [r for r in records if isinstance(r, RunAdmitted)]
    assert admitted.thread is not None and admitted.thread.run == first.workflow_id
    assert admitted.thread_bound == 0
    note = (
        f"(the model was shown none of the earlier Run {first.workflow_id}'s conversation: "
        "limits.max_history_records is 0)"
    )
    text, markdown = io.StringIO(), io.StringIO()
    print_transcript(transcript, text, markdown=False)
    print_transcript(transcript, markdown, markdown=True)
    assert note in text.getvalue().splitlines()
    assert f"*{note}*" in markdown.getvalue()
    assert "first shown" not in text.getvalue() + markdown.getvalue()


async def test_a_thread_of_another_tenant_or_an_unknown_run_is_refused(harness: Harness) -> None:
    client = harness.client
    async with harness.worker():
        first = await earlier_run(harness)
        other = Scope(tenant="globex")
        with pytest.raises(AccessDenied, match="does not belong to tenant 'globex'"):
            await client.dispatch(
                spec(harness, "spy"), "What did acme ask?", scope=other, thread=first
            )
        with pytest.raises(NotFound, match="no Run psych-acme-nosuchrun"):
            await client.dispatch(
                spec(harness, "lost"), "Hello", scope=harness.scope, thread="psych-acme-nosuchrun"
            )
    assert len(harness.fake.requests) == 2  # nothing ran for the refused dispatches


async def test_an_idempotency_key_names_its_thread_too(harness: Harness) -> None:
    # The same key with the same messages but another thread (or none) is another input.
    client = harness.client
    async with harness.worker():
        first = await earlier_run(harness)
        harness.fake.enqueue(Reply.text("It shipped, as I said."))
        later = spec(harness, "second")
        run = await client.dispatch(
            later, "And now?", scope=harness.scope, thread=first, idempotency_key="k-thread"
        )
        await client.result(run, scope=harness.scope)
        again = await client.dispatch(
            later, "And now?", scope=harness.scope, thread=first, idempotency_key="k-thread"
        )
        assert again.workflow_id == run.workflow_id
        with pytest.raises(PsychError, match=r"with another input \(another thread\)"):
            await client.dispatch(
                later, "And now?", scope=harness.scope, idempotency_key="k-thread"
            )


async def test_next_run_continues_the_thread(harness: Harness) -> None:
    gate, started = asyncio.Event(), asyncio.Event()

    @harness.registry.register
    async def fetch(item: str) -> str:
        """Fetch an item."""
        started.set()
        await gate.wait()
        return f"{item}: 12 USD"

    agent = AgentBuilder("shop", registry=harness.registry).model("fake-model").tool("fetch")
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("fetch", {"item": "pen"})),
        Reply.text("The pen is 12 USD."),
        Reply.text("Your cart holds the pen."),
    )
    client = harness.client
    async with harness.worker():
        run = await client.dispatch(agent.build(), "Price of the pen?", scope=harness.scope)
        await asyncio.wait_for(started.wait(), 10)
        await client.steer(run, "What is in my cart?", scope=harness.scope, mode="next_run")
        gate.set()
        await client.result(run, scope=harness.scope)
        state = await client.status(run, scope=harness.scope)
        records = (await client.records(run, scope=harness.scope)).records
        (next_run,) = [r for r in records if isinstance(r, NextRunStarted)]
        await client.result(next_run.workflow_id, scope=harness.scope)
        report = await client.report(next_run.workflow_id, scope=harness.scope)
    assert report.thread is not None
    assert (report.thread.run, report.thread.head) == (run.workflow_id, state.conversation_ref)
    assert conversation(harness.fake.requests[2]) == [
        ("user", "Price of the pen?"),
        ("assistant", None),
        ("tool", "pen: 12 USD"),
        ("assistant", "The pen is 12 USD."),
        ("user", "What is in my cart?"),
    ]
