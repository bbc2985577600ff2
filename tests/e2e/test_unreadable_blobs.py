"""A Run whose model call finds a blob of its input in the store but unopenable: sealed under
keys the worker does not hold, or altered on disk. The Run fails at once (no retry opens
it), its reason naming the blob by ref and saying why, never a key, its secret or where the
store is.

Each Run asks for approval after its first model call; the worker that made that call then
stops (its caches go with it), the blob store is made unreadable to the next worker, and
that worker, approving, makes the second call.

A blob missing where compaction, the MCP catalogue or the A2A cards read it is named by ref
too, the store's directory only in the worker's log.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable

import pytest
from temporalio.client import Client

from psych_runtime.activities.blobs import EncryptedBlobStore, LocalBlobStore, blob_key
from psych_runtime.activities.tools import RulePolicy
from psych_runtime.activities.versions import FileVersionStore
from psych_runtime.specs import AgentBuilder, AgentSpec, RunFailed, WorkflowBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.testing import Usage as FakeUsage
from psych_runtime.workers import (
    Key,
    Keyring,
    PsychCodec,
    WorkerSettings,
    connect,
    run_worker,
)
from psych_runtime.workflows import (
    CompactionFailed,
    ModelCallFailed,
    ModelCallReport,
    PsychClient,
    RunHandle,
    RunSettled,
    RunStatus,
)
from tests.a2a.peer import serve_peer
from tests.mcp.fixture import McpTestServer

from ._waiting import all_records, is_waiting, only_pending, state_when
from .conftest import Harness

pytestmark = pytest.mark.e2e


def refund_agent(harness: Harness) -> AgentSpec:
    @harness.registry.register(destructive=True)
    def refund(order_id: str) -> str:
        """Refund an order."""
        return f"order {order_id} refunded"

    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("refund", {"order_id": "42"}, id="call-1")),
        Reply.text("Refunded."),
    )
    return (
        AgentBuilder("refunds", registry=harness.registry)
        .instructions("Refund what is asked.")
        .model("fake-model")
        .tool("refund")
        .build()
    )


async def first_call_then_approval(
    harness: Harness, client: PsychClient, temporal: Client, settings: WorkerSettings
) -> tuple[RunHandle, ModelCallReport]:
    """A Run of ``refund_agent`` dispatched through ``client`` and run by a worker of
    ``settings`` (stopped after) until it waits on its approval; its first model call."""
    spec = refund_agent(harness)
    async with run_worker(temporal, settings):
        run = await client.dispatch(spec, "Refund order 42", scope=harness.scope)
        await until_approval(harness, client, run)
        first = (await client.report(run, scope=harness.scope)).model_calls[0]
    return run, first


def store_lost_at_lookup(
    harness: Harness, order: str
) -> tuple[LocalBlobStore, LocalBlobStore, Callable[[str], str]]:
    """The harness's blob store, a reader of it that opens every file (no cache), and a
    registered ``lookup_order`` tool that deletes every stored blob when it looks up
    ``order``."""
    stored = harness.settings.blobs
    assert isinstance(stored, LocalBlobStore)

    @harness.registry.register
    def lookup_order(order_id: str) -> str:
        """Look up an order.

        Args:
            order_id: The order's id.
        """
        if order_id == order:
            for path in stored.root.glob("??/*"):
                path.unlink()
        return f"order {order_id}: shipped"

    return stored, LocalBlobStore(stored.root, recent_bytes=0), lookup_order


MISSING_TOOLS = (
    r"the Run's own tool definitions cannot be read: blob sha256:[0-9a-f]{64} is not in the "
    r"blob store \(deleted, or this worker reads another store than the one that wrote it\)"
)
"""A Run's failure when the blob of its own tool definitions is gone from the store."""


def told_by_ref_logged_with_store(
    reason: str, prefix: str, stored: LocalBlobStore, caplog: pytest.LogCaptureFixture
) -> None:
    """The Run's ``reason`` names the missing tool definitions by ref (after ``prefix``),
    never the store's directory, which the worker's log gives the operator."""
    assert re.fullmatch(re.escape(prefix) + MISSING_TOOLS, reason), reason
    assert str(stored.root) not in reason
    logged = [r.getMessage() for r in caplog.records if "tool definitions" in r.getMessage()]
    assert any(str(stored.root) in line for line in logged), logged


async def until_approval(harness: Harness, client: PsychClient, run: RunHandle) -> None:
    await state_when(client, run, harness.scope, is_waiting, what="the approval")


async def failed_at_the_second_call(harness: Harness, client: PsychClient, run: RunHandle) -> str:
    """The Run's reason, once checked that it failed on its second model call's input
    without calling the model, and without retrying: one failure, not transient."""
    with pytest.raises(RunFailed) as failed:
        await client.result(run, scope=harness.scope)
    assert len(harness.fake.requests) == 1  # the second call was never sent
    records = await all_records(client, run, harness.scope)
    calls = [r for r in records if isinstance(r, ModelCallFailed)]
    assert [(r.turn, r.transient) for r in calls] == [(2, False)]
    return failed.value.reason


async def test_a_blob_sealed_under_other_keys_fails_the_run_naming_it(harness: Harness) -> None:
    # The cipher's refusal (AccessDenied) failed the Run as the model's: "model_error: model
    # fake-model: AccessDenied: a payload sealed with key 'acme-1' for tenant 'acme' does
    # not authenticate ...": the key's id and tenant, and no word of which blob.
    secret = os.urandom(32)
    keys = Keyring([Key("acme-1", "acme", secret)], {"acme": "acme-1"})
    # The same key id with another secret: a worker whose keys are not its fleet's.
    other = Keyring([Key("acme-1", "acme", os.urandom(32))], {"acme": "acme-1"})
    target = harness.env.client.service_client.config.target_host
    temporal = await connect(target, namespace=harness.env.client.namespace, codec=PsychCodec(keys))
    client = PsychClient(
        temporal,
        store=FileVersionStore(harness.home / "versions"),
        task_queue=harness.settings.task_queue,
        registry=harness.registry,
    )
    settings = dataclasses.replace(harness.settings, policy=RulePolicy(destructive="ask"))
    run, first = await first_call_then_approval(harness, client, temporal, settings)
    # Its payloads open as before (the codec's keys); its blobs are opened with the other.
    stored = settings.blobs
    assert isinstance(stored, LocalBlobStore)
    elsewhere = EncryptedBlobStore(LocalBlobStore(stored.root), PsychCodec(other).blob_cipher())
    async with run_worker(temporal, dataclasses.replace(settings, blobs=elsewhere)):
        await client.approve(run, "call-1", scope=harness.scope)
        reason = await failed_at_the_second_call(harness, client, run)

    # The first blob the second call reads: the system prompt the first one stored.
    assert first.system_ref is not None
    assert reason == (
        f"model_error: model fake-model: not called: blob {first.system_ref} is in the blob "
        "store but its seal does not open with this worker's keys: it was sealed under keys "
        "this worker does not hold (the workers' codec keys differ, or a key's secret changed "
        "under its id), stored unsealed before encryption was turned on, or altered"
    )
    for private in ("acme-1", secret.hex(), str(stored.root)):
        assert private not in reason


async def test_a_blob_altered_on_disk_fails_the_run_naming_it(harness: Harness) -> None:
    # Altered, a blob no longer hashes to its ref: the model call failed naming the ref but
    # as the model's failure, in the store's words, with the store's directory in them.
    settings = dataclasses.replace(harness.settings, policy=RulePolicy(destructive="ask"))
    client = harness.client
    run, first = await first_call_then_approval(harness, client, harness.env.client, settings)
    stored = settings.blobs
    assert isinstance(stored, LocalBlobStore) and first.context_ref is not None
    # The conversation the first call ended with, which the second call continues.
    (stored.root / blob_key(first.context_ref)).write_bytes(b'{"parent":null,"messages":[]}')
    fresh = dataclasses.replace(settings, blobs=LocalBlobStore(stored.root))
    async with run_worker(harness.env.client, fresh):
        await client.approve(run, "call-1", scope=harness.scope)
        reason = await failed_at_the_second_call(harness, client, run)

    assert reason == (
        f"model_error: model fake-model: not called: blob {first.context_ref} is in the blob "
        "store but damaged: its bytes no longer match their ref (cut short by a crash, or "
        "altered)"
    )
    assert str(stored.root) not in reason


async def test_a_missing_blob_fails_the_run_naming_its_ref_not_the_store(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    # A blob gone from the store (deleted, or a worker pointed at another store) failed
    # the Run as "model fake-model: no blob sha256:... in /path/of/the/store": where the
    # store is told to the Run's caller, while the worker's log is where an operator looks.
    settings = dataclasses.replace(harness.settings, policy=RulePolicy(destructive="ask"))
    client = harness.client
    run, first = await first_call_then_approval(harness, client, harness.env.client, settings)
    stored = settings.blobs
    assert isinstance(stored, LocalBlobStore) and first.context_ref is not None
    (stored.root / blob_key(first.context_ref)).unlink()
    fresh = dataclasses.replace(settings, blobs=LocalBlobStore(stored.root))
    with caplog.at_level("WARNING"):
        async with run_worker(harness.env.client, fresh):
            await client.approve(run, "call-1", scope=harness.scope)
            reason = await failed_at_the_second_call(harness, client, run)

    assert reason == (
        f"model_error: model fake-model: not called: blob {first.context_ref} is not in the "
        "blob store (deleted, or this worker reads another store than the one that wrote it)"
    )
    assert str(stored.root) not in reason
    # Where the worker looked is the operator's: in its log.
    logged = [r.getMessage() for r in caplog.records if first.context_ref in r.getMessage()]
    assert any(str(stored.root) in line for line in logged), logged


async def test_a_missing_blob_of_a_compaction_is_named_by_ref_in_its_record(
    harness: Harness,
) -> None:
    # The summariser's activity reads the conversation's chain itself, before any model
    # call: a blob missing there was recorded as CompactionFailed in the store's words,
    # "no blob sha256:... in /path/of/the/store", in the Run's records for its caller.
    # The store loses the conversation before it is compacted (at order 2's lookup).
    stored, blobs, lookup_order = store_lost_at_lookup(harness, "2")

    spec = (
        AgentBuilder("compactor", registry=harness.registry)
        .instructions("Help with orders.")
        .model("fake-model")
        .tool(lookup_order)
        .compaction(100, keep_recent_turns=1, model="fake-other")
        .build()
    )
    big = FakeUsage(input_tokens=300, output_tokens=5)
    harness.fake.enqueue(
        *(Reply.tool_calls(ToolCall("lookup_order", {"order_id": n}), usage=big) for n in "12"),
        Reply.text("Both shipped."),  # turn 3: the worker still holds the conversation
    )
    client = harness.client
    async with run_worker(harness.env.client, dataclasses.replace(harness.settings, blobs=blobs)):
        run = await client.dispatch(spec, "Check orders", scope=harness.scope)
        result = await client.result(run, scope=harness.scope)
        records = await all_records(client, run, harness.scope)
    assert result.status is RunStatus.COMPLETED
    (failed,) = [r for r in records if isinstance(r, CompactionFailed)]
    assert str(stored.root) not in failed.error
    prefix = "CompactionFailed: the conversation cannot be read: blob sha256:"
    assert failed.error.startswith(prefix), failed.error
    assert "is not in the blob store" in failed.error


async def test_a_missing_blob_of_the_a2a_cards_fails_the_run_naming_its_ref_not_the_store(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    # The cards activity reads the Run's own tool definitions at each turn boundary to add
    # the peers' skills to them: a blob missing there failed the Run as "no blob
    # sha256:... in /path/of/the/store", where the store is told to the Run's caller. And
    # that local activity's non-retryable failure failed the workflow execution itself:
    # the Run's records ended without RunSettled (patch psych-a2a-cards-failure-settles).
    stored, blobs, lookup_order = store_lost_at_lookup(harness, "1")

    harness.fake.enqueue(Reply.tool_calls(ToolCall("lookup_order", {"order_id": "1"})))
    client = harness.client
    async with serve_peer(("echo",)) as peer:
        spec = (
            AgentBuilder("caller", registry=harness.registry)
            .model("fake-model")
            .tool(lookup_order)
            .a2a_peer("helper", peer.url)
            .build()
        )
        settings = dataclasses.replace(harness.settings, blobs=blobs)
        with caplog.at_level("WARNING"):
            async with run_worker(harness.env.client, settings):
                run = await client.dispatch(spec, "Check order 1", scope=harness.scope)
                with pytest.raises(RunFailed) as failed:
                    await client.result(run, scope=harness.scope)
                records = await all_records(client, run, harness.scope)
    reason = failed.value.reason
    assert len(harness.fake.requests) == 1  # the second turn's call was never made
    told_by_ref_logged_with_store(reason, "A2A cards: BlobNotFound: ", stored, caplog)
    settled = records[-1]
    assert isinstance(settled, RunSettled) and settled.status is RunStatus.FAILED


async def test_a_missing_blob_of_an_mcp_catalogue_fails_the_run_naming_its_ref_not_the_store(
    harness: Harness, mcp_http_server: McpTestServer, caplog: pytest.LogCaptureFixture
) -> None:
    # A workflow's tool step asks the MCP catalogue activity, which reads the Run's own tool
    # definitions to add the servers' tools to them: a blob missing there failed the Run as
    # "MCP discovery failed: BlobNotFound: no blob sha256:... in /path/of/the/store". A
    # fresh worker (no catalogue built yet) runs the step after the store lost its blobs.
    @harness.registry.register(destructive=True)
    def refund(order_id: str) -> str:
        """Refund an order."""
        return f"order {order_id} refunded"

    spec = (
        WorkflowBuilder("refund-then-greet", registry=harness.registry)
        .tool("refund")
        .mcp_server("tools", mcp_http_server.url)
        .tool_step("refund", "refund", {"order_id": "42"})
        .tool_step("greet", "tools__echo", {"text": "hi"})
        .build()
    )
    settings = dataclasses.replace(harness.settings, policy=RulePolicy(destructive="ask"))
    client = harness.client
    async with run_worker(harness.env.client, settings):
        run = await client.dispatch(spec, "go", scope=harness.scope)
        state = await state_when(client, run, harness.scope, is_waiting, what="the approval")
    stored = settings.blobs
    assert isinstance(stored, LocalBlobStore)
    for path in stored.root.glob("??/*"):
        path.unlink()
    fresh = dataclasses.replace(settings, blobs=LocalBlobStore(stored.root))
    with caplog.at_level("WARNING"):
        async with run_worker(harness.env.client, fresh):
            await client.approve(run, only_pending(state).id, scope=harness.scope)
            with pytest.raises(RunFailed) as failed:
                await client.result(run, scope=harness.scope)
    reason = failed.value.reason
    told_by_ref_logged_with_store(reason, "MCP discovery failed: BlobNotFound: ", stored, caplog)
