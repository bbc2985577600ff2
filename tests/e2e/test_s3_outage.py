"""A Run whose S3 blob store (moto on loopback, behind a TCP relay the test closes) does not
answer during a model call: each failed call is transient, so the Run retries it under its
``transient_retry_budget`` and survives an outage shorter than that; one longer fails the
Run naming the blob by ref and the store's kind, the endpoint only in the worker's log.

The worker's S3 client makes one attempt per request (``AWS_MAX_ATTEMPTS=1``, botocore's
own setting), so botocore's retries do not wait out the outage first.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import pytest

from psych_runtime.activities.blobs import S3BlobStore, parse_s3_url
from psych_runtime.activities.model._compaction import SUMMARY_HEADER
from psych_runtime.activities.tools import RulePolicy
from psych_runtime.specs import AgentBuilder, Limits, RunFailed
from psych_runtime.testing import Reply, ToolCall, Usage
from psych_runtime.workers import run_worker
from psych_runtime.workers.console import format_record
from psych_runtime.workflows import (
    CompactionFailed,
    ModelCallFailed,
    ModelCallFinished,
    Record,
    RunHandle,
    ToolCallFinished,
)
from psych_runtime.workflows.kernel._tool_calls import RESULT_LOST
from tests._ports import free_port
from tests._s3_server import REGION, S3Server, s3_server
from tests._tcp_gate import TcpGate, s3_gate
from tests.a2a.peer import serve_peer
from tests.mcp.fixture import start_mcp_server

from ._http_server import CountingServer, refund_tool
from ._waiting import all_records, eventually, is_waiting, state_when
from .conftest import Harness
from .test_compaction import BIG, SMALL, SUMMARISER, lookup
from .test_compaction import agent as compacting_agent
from .test_unreadable_blobs import refund_agent, until_approval

pytestmark = pytest.mark.e2e

UNANSWERED = (
    r"model fake-model: blob sha256:[0-9a-f]{64} cannot be stored: the S3 blob store did not "
    r"answer \(connection failed: EndpointConnectionError\)"
)
"""A model call's failure when the store refused its connection storing a blob."""


@pytest.fixture(scope="module")
async def s3() -> AsyncIterator[S3Server]:
    async with s3_server() as server:
        yield server


@pytest.fixture
async def gate(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[TcpGate]:
    """A relay to the S3 server; the worker's clients make one attempt per request."""
    async with s3_gate(s3.endpoint, monkeypatch) as relay:
        yield relay


@asynccontextmanager
async def worker_behind(
    harness: Harness, s3: S3Server, gate: TcpGate, policy: RulePolicy | None = None
) -> AsyncIterator[S3BlobStore]:
    """A worker of ``harness`` (asking before a destructive tool unless ``policy`` says
    otherwise) whose blob store is a new bucket reached through ``gate``, while the block
    runs; its store."""
    bucket = await s3.new_bucket(versioned=False)
    url = f"s3://{bucket}?endpoint={gate.endpoint}&region={REGION}"
    async with S3BlobStore(parse_s3_url(url)) as blobs:
        settings = dataclasses.replace(
            harness.settings, blobs=blobs, policy=policy or RulePolicy(destructive="ask")
        )
        async with run_worker(harness.env.client, settings):
            yield blobs


async def denied_behind_a_closed_gate(harness: Harness, gate: TcpGate, budget: int) -> RunHandle:
    """A Run of ``refund_agent`` (``budget`` transient retries) whose first model call
    asks to refund, denied once the gate is closed: its second model call is the next
    request to the store (a denial runs no tool)."""
    spec = refund_agent(harness).model_copy(
        update={"limits": Limits(transient_retry_budget=budget)}
    )
    run = await harness.client.dispatch(spec, "Refund order 42", scope=harness.scope)
    await until_approval(harness, harness.client, run)
    await gate.close()
    await harness.client.deny(run, "call-1", scope=harness.scope)
    return run


def logged_with_endpoint(caplog: pytest.LogCaptureFixture, gate: TcpGate, bucket: str) -> None:
    """The worker's log gives the store's endpoint and bucket of each failure."""
    logged = [r.getMessage() for r in caplog.records if "did not answer at" in r.getMessage()]
    assert logged, "no failure logged"
    assert all(gate.endpoint in line and bucket in line for line in logged), logged


def recorded_unknown_and_told(harness: Harness, records: Sequence[Record]) -> None:
    """The Run's one call, call-1, is recorded ``unknown`` (it ran; its result is lost),
    and the model's next request told it so (``RESULT_LOST``), not an error."""
    [call] = [r for r in records if isinstance(r, ToolCallFinished)]
    assert (call.call_id, call.status, call.content) == ("call-1", "unknown", RESULT_LOST)
    told = harness.fake.requests[-1]["messages"][-1]
    assert (told["role"], told["content"]) == ("tool", RESULT_LOST)


async def test_a_run_survives_a_short_blob_store_outage(
    harness: Harness, s3: S3Server, gate: TcpGate, caplog: pytest.LogCaptureFixture
) -> None:
    # botocore's EndpointConnectionError failed the model call as not transient, naming
    # the endpoint: "model fake-model: EndpointConnectionError: Could not connect to the
    # endpoint URL: "http://127.0.0.1:<port>/<bucket>/<key>"", and the Run with it.
    async with worker_behind(harness, s3, gate) as blobs:
        run = await denied_behind_a_closed_gate(harness, gate, budget=8)

        async def failed_once() -> bool:
            records = await all_records(harness.client, run, harness.scope)
            return any(isinstance(r, ModelCallFailed) for r in records)

        await eventually(failed_once, what="a model call failed by the outage")
        await gate.open()
        result = await harness.client.result(run, scope=harness.scope)
        records = await all_records(harness.client, run, harness.scope)  # a query: a worker

    assert result.answer == "Refunded."
    failed = [r for r in records if isinstance(r, ModelCallFailed)]
    assert failed and all(r.turn == 2 and r.transient for r in failed), failed
    for record in failed:
        assert re.fullmatch(UNANSWERED, record.message), record.message
        assert str(gate.port) not in record.message
    assert [r.turn for r in records if isinstance(r, ModelCallFinished)] == [1, 2]
    assert len(harness.fake.requests) == 2  # each failure came before the model was asked
    logged_with_endpoint(caplog, gate, blobs.location.bucket)


async def test_an_outage_longer_than_the_budget_fails_the_run_naming_the_blob(
    harness: Harness, s3: S3Server, gate: TcpGate, caplog: pytest.LogCaptureFixture
) -> None:
    async with worker_behind(harness, s3, gate) as blobs:
        run = await denied_behind_a_closed_gate(harness, gate, budget=1)
        with pytest.raises(RunFailed) as caught:
            await harness.client.result(run, scope=harness.scope)
        records = await all_records(harness.client, run, harness.scope)

    reason = caught.value.reason
    spent = "transient_retry_budget exhausted: 1 retries spent; last failure: "
    assert re.fullmatch(re.escape(spent) + UNANSWERED, reason), reason
    bucket = blobs.location.bucket
    for private in (gate.endpoint, str(gate.port), bucket):
        assert private not in reason
    failed = [r for r in records if isinstance(r, ModelCallFailed)]
    assert [(r.turn, r.transient, r.budget_left) for r in failed] == [(2, True, 0), (2, True, 0)]
    assert len(harness.fake.requests) == 1  # turn 2's call never reached the model
    logged_with_endpoint(caplog, gate, bucket)


async def test_an_answer_the_store_could_not_keep_is_counted_in_the_runs_totals(
    harness: Harness, s3: S3Server, gate: TcpGate
) -> None:
    # The model answered (the provider billed it), then storing the answer found the store
    # gone: a transient failure, so the call is made again once the store answers. Each
    # answer the provider sent is in the Run's totals (until 12-06 the first was lost).
    answered = Usage(input_tokens=100, output_tokens=10)
    sent: list[str] = []

    def respond(body: dict[str, object]) -> Reply:
        if not sent:
            gate.shut()  # the answer is on its way; the store it is kept in is gone
        sent.append("answer")
        return Reply.text("Hello.", usage=answered)

    harness.fake.responder = respond
    spec = AgentBuilder("greeter").model("fake-model").limits(transient_retry_budget=8).build()
    async with worker_behind(harness, s3, gate):
        run = await harness.client.dispatch(spec, "Hi", scope=harness.scope)

        async def failed_once() -> bool:
            records = await all_records(harness.client, run, harness.scope)
            return any(isinstance(r, ModelCallFailed) for r in records)

        await eventually(failed_once, what="a model call failed storing its answer")
        await gate.open()
        result = await harness.client.result(run, scope=harness.scope)

    assert result.answer == "Hello."
    usage = result.totals.usage
    assert len(sent) >= 2
    assert (usage.input_tokens, usage.output_tokens) == (100 * len(sent), 10 * len(sent))


async def test_a_tool_not_safe_to_repeat_that_ran_but_whose_result_was_lost_is_unknown(
    harness: Harness, s3: S3Server, gate: TcpGate
) -> None:
    # The refund ran, then storing its outcome found the store gone. Until 12-06 the
    # activity failed StoreUnavailable and the model read "the tool call failed: ...", an
    # error inviting it to refund again: the effect would happen twice.
    ran: list[str] = []

    @harness.registry.register(destructive=True)
    async def refund(order_id: str) -> str:
        """Refund an order."""
        ran.append(order_id)
        gate.shut()  # refunded; the store its result is kept in is gone
        return f"order {order_id} refunded"

    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("refund", {"order_id": "42"}, id="call-1")),
        Reply.text("I cannot tell whether it went through; please check."),
    )
    spec = (
        AgentBuilder("refunds", registry=harness.registry)
        .model("fake-model")
        .tool("refund")
        .limits(transient_retry_budget=8)
        .build()
    )
    async with worker_behind(harness, s3, gate, RulePolicy()):
        run = await harness.client.dispatch(spec, "Refund order 42", scope=harness.scope)

        async def finished() -> bool:
            records = await all_records(harness.client, run, harness.scope)
            return any(isinstance(r, ToolCallFinished) for r in records)

        await eventually(finished, what="the refund's call finished")
        await gate.open()
        await harness.client.result(run, scope=harness.scope)
        records = await all_records(harness.client, run, harness.scope)

    assert ran == ["42"]
    recorded_unknown_and_told(harness, records)


async def test_a_summary_the_store_could_not_keep_is_counted_in_the_runs_totals(
    harness: Harness, s3: S3Server, gate: TcpGate
) -> None:
    # The summariser answered (billed), then storing its summary found the store not
    # answering (the gate cuts the requests storing it): until 12-06 the activity failed with the
    # store's error as is, and the Run's totals left out what that answer cost (a model
    # call's own answer has counted since 1ca539f).
    spent = Usage(input_tokens=400, output_tokens=64)
    harness.fake.enqueue(lookup("1", BIG), lookup("2", BIG), Reply.text("Done.", usage=SMALL))
    harness.fake.enqueue(Reply.text("Orders 1 and 2 shipped.", usage=spent), model=SUMMARISER)
    gate.cut_when(SUMMARY_HEADER.split(",")[0].encode())  # the summary message's blob
    async with worker_behind(harness, s3, gate, RulePolicy()):
        run = await harness.client.dispatch(
            compacting_agent(harness), "Check orders", scope=harness.scope
        )
        result = await harness.client.result(run, scope=harness.scope)
        records = await all_records(harness.client, run, harness.scope)
        report = await harness.client.report(run, scope=harness.scope)

    assert result.answer == "Done."
    assert gate.cuts >= 1
    usage = result.totals.usage
    assert (usage.input_tokens, usage.output_tokens) == (300 + 300 + 10 + 400, 5 * 3 + 64)
    [failed] = [r for r in records if isinstance(r, CompactionFailed)]
    assert re.fullmatch(
        rf"ModelCallFailed: model {SUMMARISER}: blob sha256:[0-9a-f]{{64}} cannot be stored: "
        r"the S3 blob store did not answer \(connection lost or timed out: \w+\)",
        failed.error,
    ), failed.error
    # The record says what the failed call billed, as the totals count it (before, only the
    # totals had it); its report lists it so.
    assert failed.usage is not None
    assert (failed.usage.input_tokens, failed.usage.output_tokens) == (400, 64)
    assert format_record(failed).endswith("[billed 400 in / 64 out tokens]")
    assert [c.usage for c in report.compactions] == [failed.usage]


async def test_a_post_whose_result_was_lost_is_unknown_and_sent_once(
    harness: Harness, s3: S3Server, gate: TcpGate
) -> None:
    # An HTTP tool with POST (not safe to repeat): the API refunded, then the store did not
    # keep the answer (the gate cuts the requests storing it). Until 12-06 the model read
    # "the tool call failed: ...", an error inviting it to POST again.
    api = CountingServer(respond=lambda seen: (200, '{"refund": "REFUNDED-42"}')).start()
    try:
        harness.fake.enqueue(
            Reply.tool_calls(ToolCall("refund", {"order_id": "42"}, id="call-1")),
            Reply.text("I cannot tell whether it went through; please check."),
        )
        spec = (
            AgentBuilder("refunds", registry=harness.registry)
            .model("fake-model")
            .http_tool("refund", **refund_tool(api.url))
            .build()
        )
        gate.cut_when(b"REFUNDED-42")
        async with worker_behind(harness, s3, gate, RulePolicy()):
            run = await harness.client.dispatch(spec, "Refund order 42", scope=harness.scope)
            await harness.client.result(run, scope=harness.scope)
            records = await all_records(harness.client, run, harness.scope)
    finally:
        api.stop()

    assert api.count("POST", "/orders/42/refund") == 1
    assert gate.cuts >= 1
    recorded_unknown_and_told(harness, records)


async def test_a_post_that_never_left_whose_outcome_was_lost_is_told_it_did_not_run(
    harness: Harness, s3: S3Server, gate: TcpGate
) -> None:
    # The API's port refuses the connection, so nothing was sent; then the store did not
    # keep the error outcome (the gate cuts the request storing it). Until 12-06 the Run
    # recorded the call unknown and told the model it ran (RESULT_LOST).
    closed = f"http://127.0.0.1:{free_port()}"
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("refund", {"order_id": "42"}, id="call-1")),
        Reply.text("The refund did not go through."),
    )
    spec = (
        AgentBuilder("refunds", registry=harness.registry)
        .model("fake-model")
        .http_tool("refund", **refund_tool(closed))
        .build()
    )
    gate.cut_when(b"ConnectError")
    async with worker_behind(harness, s3, gate, RulePolicy()):
        run = await harness.client.dispatch(spec, "Refund order 42", scope=harness.scope)
        await harness.client.result(run, scope=harness.scope)
        records = await all_records(harness.client, run, harness.scope)

    assert gate.cuts >= 1
    [call] = [r for r in records if isinstance(r, ToolCallFinished)]
    assert (call.call_id, call.status) == ("call-1", "error")
    told = harness.fake.requests[-1]["messages"][-1]
    assert told["role"] == "tool"
    assert re.fullmatch(
        r"the tool call failed: StoreUnavailable: the call did not run \(its request never "
        r"left\), and its outcome \(error\) could not be kept: blob sha256:[0-9a-f]{64} "
        r"cannot be stored: the S3 blob store did not answer \(.*\)",
        told["content"],
    ), told["content"]


async def test_an_mcp_write_whose_result_was_lost_is_unknown_and_called_once(
    harness: Harness, s3: S3Server, gate: TcpGate
) -> None:
    # An unannotated MCP tool (a write, not safe to repeat) charged, then the store did not
    # keep its result (the gate cuts the requests storing it): the model must not read an
    # error inviting it to charge again.
    server = start_mcp_server("streamable-http")
    try:
        harness.fake.enqueue(
            Reply.tool_calls(ToolCall("tools__charge", {"amount": 4242}, id="call-1")),
            Reply.text("I cannot tell whether it went through; please check."),
        )
        spec = AgentBuilder("payer").model("fake-model").mcp_server("tools", server.url).build()
        gate.cut_when(b"charged 4242")
        async with worker_behind(harness, s3, gate, RulePolicy()):
            run = await harness.client.dispatch(spec, "Charge 4242", scope=harness.scope)
            await harness.client.result(run, scope=harness.scope)
            records = await all_records(harness.client, run, harness.scope)
        charged = server.calls("charge")
    finally:
        server.stop()

    assert charged == 1
    assert gate.cuts >= 1
    [call] = [r for r in records if isinstance(r, ToolCallFinished)]
    assert (call.call_id, call.status, call.content) == ("call-1", "unknown", RESULT_LOST)


async def test_an_answer_sent_to_a_peer_whose_result_was_lost_is_unknown(
    harness: Harness, s3: S3Server, gate: TcpGate
) -> None:
    # The person's answer to an A2A peer's question went to the peer (a message, not safe
    # to repeat), the peer completed its task, then the store did not keep the outcome (the
    # gate cuts the requests storing it). The model must be told the call ran and its result
    # is lost, as for the first message, not an error inviting it to message the peer again.
    async with serve_peer(("ask",)) as peer:
        harness.fake.enqueue(
            Reply.tool_calls(ToolCall("helper__ask", {"message": "ask:which colour?"}, id="c1")),
            Reply.text("I cannot tell whether the helper got it; please check."),
        )
        spec = (
            AgentBuilder("asker")
            .model("fake-model")
            .suspension(may_ask_questions=True)
            .a2a_peer("helper", peer.url)
            .build()
        )
        gate.cut_when(b"answered: blue")
        async with worker_behind(harness, s3, gate, RulePolicy()):
            run = await harness.client.dispatch(spec, "Pick a colour", scope=harness.scope)
            state = await state_when(
                harness.client, run, harness.scope, is_waiting, what="the peer's question"
            )
            [pending] = state.pending
            await harness.client.answer(run, pending.id, "blue", scope=harness.scope)
            await harness.client.result(run, scope=harness.scope)
            records = await all_records(harness.client, run, harness.scope)

    assert peer.texts() == ["ask:which colour?", "blue"]
    assert gate.cuts >= 1
    [call] = [r for r in records if isinstance(r, ToolCallFinished)]
    assert (call.call_id, call.status, call.content) == ("c1", "unknown", RESULT_LOST)
    told = harness.fake.requests[-1]["messages"][-1]
    assert (told["role"], told["content"]) == ("tool", RESULT_LOST)
