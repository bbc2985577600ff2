"""AgentRun end to end on a real dev server: tools, stop conditions, failures, guards."""

from __future__ import annotations

import dataclasses
import json
import re
import uuid
from collections.abc import Iterator

import pytest

from psych_runtime.activities.blobs import LocalBlobStore, blob_key
from psych_runtime.activities.contract import Usage
from psych_runtime.activities.model import Endpoint, ModelEndpoints
from psych_runtime.specs import AccessDenied, AgentBuilder, RunFailed, Scope
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.testing import Usage as FakeUsage
from psych_runtime.workflows import (
    ModelCallFailed,
    ModelCallStarted,
    RunStatus,
    ToolCallFinished,
    ToolWithheld,
)

from ._http_server import CountingServer, refund_tool
from .conftest import Harness

pytestmark = pytest.mark.e2e


@pytest.fixture
def orders_api() -> Iterator[CountingServer]:
    server = CountingServer(
        respond=lambda seen: (200, json.dumps({"refunded": True, "path": seen.path}))
    ).start()
    yield server
    server.stop()


def lookup_order(order_id: str) -> dict[str, str]:
    """Look up an order.

    Args:
        order_id: The order's id.
    """
    return {"order_id": order_id, "status": "delivered"}


def flaky(x: int) -> str:
    """A tool that always fails."""
    raise ValueError(f"cannot handle {x}")


async def test_multi_turn_code_and_http_tools(harness: Harness, orders_api: CountingServer) -> None:
    builder = (
        AgentBuilder("support", registry=harness.registry)
        .instructions("Help with orders.")
        .model("fake-model")
        .tool(lookup_order)
        .http_tool(
            "refund",
            **refund_tool(orders_api.url),
            input_schema={
                "type": "object",
                "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
                "required": ["order_id"],
            },
            credential="orders-key",
        )
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "42"})),
        Reply.tool_calls(ToolCall("refund", {"order_id": "42", "amount": 5})),
        Reply.text("Refunded order 42."),
    )
    client = harness.client
    async with harness.worker():
        run = await client.dispatch(builder.build(), "Refund order 42", scope=harness.scope)
        result = await client.result(run, scope=harness.scope)
        report = await client.report(run, scope=harness.scope)
        records = [r async for r in client.stream(run, scope=harness.scope)]

    assert result.status is RunStatus.COMPLETED
    assert result.answer == "Refunded order 42."
    assert orders_api.count("POST", "/orders/42/refund") == 1
    sent = orders_api.seen[0]
    assert sent.headers["authorization"] == "Bearer s3cret"
    assert json.loads(sent.body) == {"amount": 5}

    assert [r.seq for r in records] == list(range(1, len(records) + 1))
    assert {r.scope.tenant for r in records} == {"acme"}
    assert [c.tool for c in report.tool_calls] == ["lookup_order", "refund"]
    assert [c.status for c in report.tool_calls] == ["ok", "ok"]
    assert "delivered" in (report.tool_calls[0].result or "")
    assert len(report.model_calls) == 3 and all(c.ok for c in report.model_calls)
    assert report.system_prompt.startswith("Help with orders.")
    assert report.totals is not None and report.totals.turns == 3
    assert report.totals.cost is None  # no pricing configured: unknown, never 0

    # The third model call saw the whole conversation, tool results in call order.
    last = harness.fake.requests[2]["messages"]
    assert [m["role"] for m in last] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
    ]
    assert "delivered" in last[3]["content"]


async def test_max_turns_stops_the_run(harness: Harness) -> None:
    harness.registry.register(lookup_order)
    spec = (
        AgentBuilder("looper", registry=harness.registry)
        .model("fake-model")
        .tool("lookup_order")
        .limits(max_turns=2)
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "1"})),
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "2"})),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
    assert result.status is RunStatus.STOPPED
    assert result.reason.startswith("max_turns")
    assert result.totals.turns == 2


async def test_fallback_on_5xx_and_429_with_retry_after(harness: Harness) -> None:
    spec = AgentBuilder("fb").model("fake-model", fallbacks=["fake-fallback"]).build()
    harness.fake.enqueue(
        Reply.error(429, retry_after=1.5), Reply.text("finally"), model="fake-model"
    )
    harness.fake.enqueue(Reply.error(500), Reply.error(503), model="fake-fallback")
    async with harness.worker():
        run = await harness.client.dispatch(spec, "hi", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert result.answer == "finally"
    # The 429 sends the next attempt to the fallback at once; when the fallback fails too,
    # the model that is ready soonest goes next: the fallback after its 0.5 s backoff, then
    # the primary once its Retry-After has passed.
    assert [(c.model, c.ok) for c in report.model_calls] == [
        ("fake-model", False),
        ("fake-fallback", False),
        ("fake-fallback", False),
        ("fake-model", True),
    ]
    assert result.totals.transient_failures == 3
    limited = next(r for r in records if isinstance(r, ModelCallFailed) and r.status == 429)
    assert limited.retry_after == 1.5
    retried = [
        r
        for r in records
        if isinstance(r, ModelCallStarted) and r.model == "fake-model" and r.seq > limited.seq
    ]
    assert (retried[0].at - limited.at).total_seconds() >= 1.5


async def test_retry_budget_exhaustion_fails_the_run(harness: Harness) -> None:
    spec = AgentBuilder("budget").model("fake-model").limits(transient_retry_budget=2).build()
    harness.fake.enqueue(Reply.error(502), Reply.error(502), Reply.error(502), Reply.error(502))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "hi", scope=harness.scope)
        with pytest.raises(RunFailed, match="transient_retry_budget exhausted"):
            await harness.client.result(run, scope=harness.scope)
        state = await harness.client.status(run, scope=harness.scope)
    assert state.status is RunStatus.FAILED
    assert len(harness.fake.requests) == 3  # the first try and two retries, no more


async def test_non_transient_400_fails_at_once(harness: Harness) -> None:
    spec = AgentBuilder("bad").model("fake-model").build()
    harness.fake.enqueue(Reply.error(400, message="bad request shape"))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "hi", scope=harness.scope)
        with pytest.raises(RunFailed, match="model_error"):
            await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    failed = [r for r in records if isinstance(r, ModelCallFailed)]
    assert len(failed) == 1 and failed[0].transient is False
    assert len(harness.fake.requests) == 1


async def test_malformed_and_unknown_tool_calls_reach_the_model(harness: Harness) -> None:
    harness.registry.register(lookup_order)
    spec = (
        AgentBuilder("m", registry=harness.registry)
        .model("fake-model")
        .tool("lookup_order")
        .build()
    )
    harness.fake.enqueue(
        Reply.malformed_tool_call("lookup_order", '{"order_id": '),
        Reply.tool_calls(ToolCall("no_such_tool", {})),
        Reply.text("done"),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "hi", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
    assert result.answer == "done"
    second = harness.fake.requests[1]["messages"][-1]
    third = harness.fake.requests[2]["messages"][-1]
    assert second["role"] == "tool" and "not valid JSON" in second["content"]
    assert third["role"] == "tool" and "unknown tool 'no_such_tool'" in third["content"]
    assert "lookup_order" in third["content"]


async def test_arguments_with_half_a_surrogate_pair_reach_the_model_as_an_error(
    harness: Harness,
) -> None:
    # Valid JSON whose string holds a lone UTF-16 surrogate escape (half an emoji) parses
    # to text no payload can carry: the workflow task failed on scheduling the tool's
    # activity, again at every retry, and the Run never ended.
    harness.registry.register(lookup_order)
    spec = (
        AgentBuilder("m", registry=harness.registry)
        .model("fake-model")
        .tool("lookup_order")
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("lookup_order", '{"order_id": "42 \\ud83d"}')),
        Reply.text("done"),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "hi", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED and result.answer == "done"
    (call,) = report.tool_calls
    assert call.status == "error"
    assert call.result == (
        "arguments are not valid JSON text: \\ud83d is half of a UTF-16 surrogate pair "
        "without its other half; resend"
    )
    told = harness.fake.requests[1]["messages"][-1]
    assert told["role"] == "tool" and told["content"] == call.result


async def test_a_result_holding_undecodable_bytes_is_the_tools_result(harness: Harness) -> None:
    # Python decodes bytes that are not UTF-8 (file names, a subprocess's output) with
    # "surrogateescape" into lone surrogates, which no UTF-8 text holds: storing such a
    # result failed the activity after the tool had run, and the model read "the tool
    # call failed" for a call not safe to repeat that had in fact been made.
    ran: list[str] = []

    def list_files() -> list[str]:
        """List the files."""
        ran.append("list_files")
        return ["report.txt", b"caf\xe9.txt".decode("utf-8", "surrogateescape")]

    harness.registry.register(list_files)
    spec = (
        AgentBuilder("files", registry=harness.registry)
        .model("fake-model")
        .tool("list_files")
        .build()
    )
    harness.fake.enqueue(Reply.tool_calls(ToolCall("list_files", {})), Reply.text("done"))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "hi", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert result.answer == "done"
    assert ran == ["list_files"]
    (call,) = report.tool_calls
    assert call.status == "ok"
    # The byte no text holds is U+FFFD, the replacement character, as a decoder with
    # errors="replace" would have made it.
    assert json.loads(call.result or "") == ["report.txt", "caf\ufffd.txt"]
    told = harness.fake.requests[1]["messages"][-1]
    assert told["role"] == "tool" and json.loads(told["content"]) == json.loads(call.result or "")


async def test_failure_streak_withholds_then_hard_stops(harness: Harness) -> None:
    harness.registry.register(flaky)
    spec = (
        AgentBuilder("streak", registry=harness.registry)
        .model("fake-model")
        .tool("flaky")
        .limits(failure_streak_threshold=2, failure_streak_hard_stop=3)
        .build()
    )
    harness.fake.enqueue(*[Reply.tool_calls(ToolCall("flaky", {"x": i})) for i in range(3)])
    async with harness.worker():
        run = await harness.client.dispatch(spec, "hi", scope=harness.scope)
        with pytest.raises(RunFailed, match="failure_streak"):
            await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert any(isinstance(r, ToolWithheld) and r.tool == "flaky" for r in records)
    third_call = harness.fake.requests[2]
    assert "flaky" not in [t["function"]["name"] for t in third_call.get("tools", [])]
    assert "withheld" in third_call["messages"][-1]["content"]


async def test_repeat_call_guard_refuses_then_stops(harness: Harness) -> None:
    harness.registry.register(lookup_order)
    spec = (
        AgentBuilder("rep", registry=harness.registry)
        .model("fake-model")
        .tool("lookup_order")
        .limits(repeat_call_threshold=2, repeat_call_hard_stop=3)
        .build()
    )
    same = ToolCall("lookup_order", {"order_id": "7"})
    harness.fake.enqueue(*[Reply.tool_calls(same) for _ in range(4)])
    async with harness.worker():
        run = await harness.client.dispatch(spec, "hi", scope=harness.scope)
        with pytest.raises(RunFailed, match="repeat_call"):
            await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    finished = [r for r in records if isinstance(r, ToolCallFinished)]
    assert [r.status for r in finished] == ["ok", "ok", "refused"]
    assert "Change approach" in finished[2].content


async def test_a_repeat_refusal_says_how_often_the_call_was_made(harness: Harness) -> None:
    # It said "refused: you called lookup_order with these arguments 1 times" (and a
    # workflow's failed step "refused: refused: ...").
    harness.registry.register(lookup_order)
    spec = (
        AgentBuilder("rep1", registry=harness.registry)
        .model("fake-model")
        .tool("lookup_order")
        .limits(repeat_call_threshold=1, repeat_call_hard_stop=3)
        .build()
    )
    same = ToolCall("lookup_order", {"order_id": "7"})
    harness.fake.enqueue(*[Reply.tool_calls(same) for _ in range(2)], Reply.text("done"))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "hi", scope=harness.scope)
        await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    finished = [r for r in records if isinstance(r, ToolCallFinished)]
    assert [r.status for r in finished] == ["ok", "refused"]
    assert finished[1].content == (
        "not run: you called lookup_order with these arguments already and have its result. "
        "Change approach instead of repeating the call."
    )
    assert harness.fake.requests[2]["messages"][-1]["content"] == finished[1].content


async def test_idempotent_dispatch_and_access_denied(harness: Harness) -> None:
    spec = AgentBuilder("idem").model("fake-model").build()
    harness.fake.enqueue(Reply.text("once"))
    async with harness.worker():
        key = f"k-{uuid.uuid4().hex}"
        first = await harness.client.dispatch(spec, "hi", scope=harness.scope, idempotency_key=key)
        await harness.client.result(first, scope=harness.scope)
        # The same key and input (new input with a used key is refused, see
        # tests/workers/test_cli_offline_dispatch.py).
        second = await harness.client.dispatch(spec, "hi", scope=harness.scope, idempotency_key=key)
        assert second.workflow_id == first.workflow_id
        assert (await harness.client.result(second, scope=harness.scope)).answer == "once"
        other = Scope(tenant="globex")
        with pytest.raises(AccessDenied):
            await harness.client.status(first, scope=other)
        with pytest.raises(AccessDenied):
            await harness.client.report(first.workflow_id, scope=other)
        listed = await harness.client.list(scope=harness.scope, agent="idem")
    assert len(harness.fake.requests) == 1
    assert [s.workflow_id for s in listed] == [first.workflow_id]


async def test_max_steps_counts_model_and_tool_calls(harness: Harness) -> None:
    harness.registry.register(lookup_order)
    spec = (
        AgentBuilder("steps", registry=harness.registry)
        .model("fake-model")
        .tool("lookup_order")
        .limits(max_steps=3)
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(
            ToolCall("lookup_order", {"order_id": "1"}),
            ToolCall("lookup_order", {"order_id": "2"}),
            ToolCall("lookup_order", {"order_id": "3"}),
        )
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.STOPPED
    assert result.reason.startswith("max_steps")
    assert result.totals.steps == 3
    # One model call and two tool calls fit; the third call was answered, not run.
    assert [c.status for c in report.tool_calls] == ["ok", "ok", "error"]
    assert "max_steps" in (report.tool_calls[2].result or "")
    assert len(harness.fake.requests) == 1


async def test_model_retries_stop_at_max_steps(harness: Harness) -> None:
    # Every attempt is a model call, so a step: a retry that max_steps leaves no room for
    # is not made (before, max_steps=1 and two 503s completed with 3 steps taken).
    spec = AgentBuilder("retrying").model("fake-model").limits(max_steps=2).build()
    harness.fake.enqueue(Reply.error(503), Reply.error(503), Reply.text("too many steps"))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "hi", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.STOPPED
    assert result.reason == "max_steps: 2 steps taken"
    assert (result.totals.steps, result.totals.model_calls) == (2, 2)
    assert result.totals.transient_failures == 2
    assert [r.attempt for r in records if isinstance(r, ModelCallStarted)] == [1, 2]
    assert len(harness.fake.requests) == 2


def big_report(size: int) -> str:
    """Produce a large text report.

    Args:
        size: How many characters.
    """
    return "".join(chr(ord("a") + i % 26) for i in range(size))


async def test_large_result_is_a_handle_the_model_can_read(harness: Harness) -> None:
    harness.registry.register(big_report)
    spec = (
        AgentBuilder("large", registry=harness.registry)
        .model("fake-model")
        .tool("big_report")
        .limits(large_result_bytes=1024)
        .build()
    )

    def respond(body: dict[str, object]) -> Reply:
        messages = body["messages"]
        assert isinstance(messages, list)
        last = messages[-1]
        if last["role"] == "user":
            return Reply.tool_calls(ToolCall("big_report", {"size": 10_000}))
        handle = re.search(r"sha256:[0-9a-f]{64}", last["content"])
        if handle and "read_tool_output" in last["content"]:
            return Reply.tool_calls(
                ToolCall("read_tool_output", {"handle": handle.group(0), "offset": 9990})
            )
        return Reply.text(f"tail was {last['content'][-10:]}")

    harness.fake.responder = respond
    async with harness.worker():
        run = await harness.client.dispatch(spec, "report please", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    first, read = report.tool_calls
    assert first.truncated
    assert first.size == 10_000
    assert len(first.result or "") < 2048
    assert read.tool == "read_tool_output"
    assert read.status == "ok"
    assert result.answer == f"tail was {big_report(10_000)[-10:]}"
    # The model was shown a handle and a preview, never the whole result.
    shown = harness.fake.requests[1]["messages"][-1]["content"]
    assert len(shown) < 4096
    assert first.result_ref is not None
    assert first.result_ref in shown


async def test_reading_a_damaged_stored_result_tells_the_model_it_is_damaged(
    harness: Harness,
) -> None:
    # The stored result is torn behind the store's back (a host crash before it reached
    # the disk): read_tool_output says so, not that no such output was ever stored.
    harness.registry.register(big_report)
    root = harness.home / "damaged-blobs"
    harness.settings = dataclasses.replace(
        harness.settings, blobs=LocalBlobStore(root, recent_bytes=0)
    )
    spec = (
        AgentBuilder("large", registry=harness.registry)
        .model("fake-model")
        .tool("big_report")
        .limits(large_result_bytes=1024)
        .build()
    )

    def respond(body: dict[str, object]) -> Reply:
        messages = body["messages"]
        assert isinstance(messages, list)
        last = messages[-1]
        if last["role"] == "user":
            return Reply.tool_calls(ToolCall("big_report", {"size": 10_000}))
        handle = re.search(r"sha256:[0-9a-f]{64}", last["content"])
        if handle and "read_tool_output" in last["content"]:
            (root / blob_key(handle.group(0))).write_bytes(b"abc")
            return Reply.tool_calls(ToolCall("read_tool_output", {"handle": handle.group(0)}))
        return Reply.text("could not read it")

    harness.fake.responder = respond
    async with harness.worker():
        run = await harness.client.dispatch(spec, "report please", scope=harness.scope)
        await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    first, read = report.tool_calls
    assert read.status == "error"
    assert read.result == (
        f"the stored tool output {first.result_ref} is damaged (its bytes no longer hash to "
        "its handle) and cannot be read; call the tool that produced it again"
    )
    assert harness.fake.requests[2]["messages"][-1]["content"] == read.result


async def test_a_result_too_large_for_a_payload_is_a_handle_whatever_the_limit(
    harness: Harness,
) -> None:
    # large_result_bytes has no upper bound, but an activity's result must fit a Temporal
    # payload (2 MB): a 3 MB result under a 100 MB limit failed the activity after the
    # tool had run, and the model read "the tool call failed: PayloadsTooLarge".
    ran: list[int] = []

    def export(size: int) -> str:
        """Export the data.

        Args:
            size: How many characters.
        """
        ran.append(size)
        return big_report(size)

    harness.registry.register(export)
    spec = (
        AgentBuilder("export", registry=harness.registry)
        .model("fake-model")
        .tool("export")
        .limits(large_result_bytes=100_000_000)
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("export", {"size": 3_000_000})), Reply.text("done")
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "export please", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert result.answer == "done"
    assert ran == [3_000_000]
    (call,) = report.tool_calls
    assert call.status == "ok"
    assert call.truncated and call.size == 3_000_000 and call.result_ref is not None
    shown = harness.fake.requests[1]["messages"][-1]["content"]
    assert call.result_ref in shown and "read_tool_output" in shown
    assert len(shown) < 4096


async def test_stream_stall_is_transient_and_retried(harness: Harness) -> None:
    spec = AgentBuilder("stall").model("fake-model").limits(stream_idle_seconds=0.5).build()
    harness.fake.enqueue(Reply.stall(3.0, after_chunks=1), Reply.text("recovered"))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "hi", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert result.answer == "recovered"
    failed = [r for r in records if isinstance(r, ModelCallFailed)]
    assert len(failed) == 1
    assert failed[0].transient
    assert "idle" in failed[0].message


async def test_an_unstreamed_silence_is_transient_and_tries_the_fallback(
    harness: Harness,
) -> None:
    # OPENAI_STREAM=0: the worker asks for whole answers. stream_idle_seconds bounds the
    # wait for the answer's bytes as it bounds a stream's gaps (before, a silent endpoint
    # held the call until the activity's 10-minute timeout).
    harness.settings = dataclasses.replace(
        harness.settings,
        endpoints=ModelEndpoints(default=Endpoint(harness.fake.base_url, "test-key", stream=False)),
    )
    spec = (
        AgentBuilder("silent")
        .model("fake-model", fallbacks=["fake-fallback"])
        .limits(stream_idle_seconds=0.5)
        .build()
    )
    harness.fake.enqueue(Reply.stall(5.0, then=Reply.text("too late")), model="fake-model")
    harness.fake.enqueue(Reply.text("recovered"), model="fake-fallback")
    async with harness.worker():
        run = await harness.client.dispatch(spec, "hi", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert result.answer == "recovered"
    assert [(c.model, c.ok) for c in report.model_calls] == [
        ("fake-model", False),
        ("fake-fallback", True),
    ]
    assert result.totals.transient_failures == 1
    (failed,) = [r for r in records if isinstance(r, ModelCallFailed)]
    assert failed.transient
    assert failed.message.startswith("model fake-model: response idle for more than 0.5 s")
    assert all(body["stream"] is False for body in harness.fake.requests)


async def test_report_keeps_calls_apart_when_a_provider_reuses_call_ids(
    harness: Harness,
) -> None:
    harness.registry.register(lookup_order)
    spec = (
        AgentBuilder("reuse", registry=harness.registry)
        .model("fake-model")
        .tool("lookup_order")
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "1"}, id="call_0")),
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "2"}, id="call_0")),
        Reply.text("done"),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert [(c.turn, c.call_id, json.loads(c.arguments)) for c in report.tool_calls] == [
        (1, "call_0", {"order_id": "1"}),
        (2, "call_0", {"order_id": "2"}),
    ]


class _FailingPricing:
    """A Pricing port whose table cannot be read."""

    def price(self, model: str, usage: Usage) -> float | None:
        raise RuntimeError("price table offline")


async def test_a_pricing_port_that_fails_leaves_the_cost_unknown_not_the_run_failed(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    # Until 12-06 the port's exception failed the model call after the model had answered:
    # the Run FAILED with a "model_error" the model never made, the answer and its usage lost.
    harness.settings.pricing = _FailingPricing()
    spec = AgentBuilder("priced").model("fake-model").build()
    harness.fake.enqueue(Reply.text("answered", usage=FakeUsage(input_tokens=7, output_tokens=3)))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "hi", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED and result.answer == "answered"
    (call,) = report.model_calls
    assert call.ok and call.cost is None  # unknown, never 0
    assert call.usage == Usage(input_tokens=7, output_tokens=3)
    assert report.totals is not None and report.totals.cost is None
    assert report.totals.usage.input_tokens == 7
    assert any(
        "pricing port failed" in r.getMessage() and "price table offline" in r.getMessage()
        for r in caplog.records
    )
