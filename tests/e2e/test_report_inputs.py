"""What each model call was sent, through the report (``report(..., inputs=...)``): its
own system prompt as sent and its input messages, read from the blob store, checked
against what the fake model received; by default only refs, nothing read; a client
without a blob store is refused by name."""

from __future__ import annotations

import dataclasses
import os

import httpx
import pytest

from psych_runtime.activities import ContextRequest, ContextSettings, ContextSource
from psych_runtime.activities.blobs import LocalBlobStore, TenantSealedBlobs, disk_answering
from psych_runtime.activities.model._request import wire_message
from psych_runtime.activities.versions import FileVersionStore
from psych_runtime.specs import (
    AgentBuilder,
    BlobsUnavailable,
    BlobUnreadable,
    NotFound,
    WorkflowBuilder,
)
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.testing import Usage as FakeUsage
from psych_runtime.workers import (
    Key,
    Keyring,
    PsychCodec,
    connect,
    run_worker,
    tenant_sealed_blobs,
)
from psych_runtime.workflows import PsychClient, RunContinued, RunStatus

from ._serve import ACME, GLOBEX, served
from ._waiting import all_records
from .conftest import Harness

pytestmark = pytest.mark.e2e

NOTE = "Customer note: prefers email."
PLAN = [{"title": "look up the order"}, {"title": "refund it"}]
DONE = [{"title": "look up the order", "status": "done"}, {"title": "refund it"}]


def reader(harness: Harness, blobs: LocalBlobStore | None) -> PsychClient:
    return PsychClient(
        harness.env.client,
        store=FileVersionStore(harness.home / "versions"),
        task_queue=harness.settings.task_queue,
        registry=harness.registry,
        blobs=blobs,
    )


class Unreadable(LocalBlobStore):
    """A store whose files this process may not open (written 0600 by another user)."""

    async def get(self, ref: str) -> bytes:
        # Said as the local store says its disk errors (LocalStoreFailed), path and all.
        with disk_answering(f"blob {ref} cannot be read", ref, str(self.root)):
            raise PermissionError(13, "Permission denied", str(self.root / ref))
        raise AssertionError("unreachable")


async def test_each_call_reports_the_system_prompt_and_messages_it_was_sent(
    harness: Harness,
) -> None:
    # The system prompt changes between calls: the task list (update_tasks) from turn 2
    # on, and a context provider's block in turn 2's call only.
    async def note(request: ContextRequest) -> str | None:
        return NOTE if request.turn == 2 else None

    harness.settings = dataclasses.replace(
        harness.settings, context=ContextSettings((ContextSource("note", note),))
    )
    spec = (
        AgentBuilder("planner")
        .instructions("Plan, then act.")
        .model("fake-model")
        .tasks(True)
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("update_tasks", {"tasks": PLAN})),
        Reply.tool_calls(ToolCall("update_tasks", {"tasks": DONE})),
        Reply.text("Refunded."),
    )
    blobs = harness.settings.blobs
    assert isinstance(blobs, LocalBlobStore)
    client = reader(harness, blobs)
    async with harness.worker():
        run = await client.dispatch(spec, "Refund order 42", scope=harness.scope)
        assert (await client.result(run, scope=harness.scope)).status is RunStatus.COMPLETED
        plain = await client.report(run, scope=harness.scope)
        full = await client.report(run, scope=harness.scope, inputs=True)
        second = await client.report(run, scope=harness.scope, inputs={2})
        without = reader(harness, None)
        with pytest.raises(BlobsUnavailable, match="this client has none: construct"):
            await without.report(run, scope=harness.scope, inputs=True)
        # Another store than the workers': the ref it misses is named.
        elsewhere = reader(harness, LocalBlobStore(harness.home / "elsewhere"))
        with pytest.raises(BlobsUnavailable, match="turn 1's model call input is not in") as err:
            await elsewhere.report(run, scope=harness.scope, inputs=True)
        assert str(harness.home) not in str(err.value)  # the server's paths are its own
        # A store the client may not read (files of another user: 0600) is said, not raised.
        refused = reader(harness, Unreadable(harness.home / "elsewhere"))
        with pytest.raises(
            BlobsUnavailable,
            match=r"could not be read: blob .* the local blob store failed .EACCES",
        ) as err:
            await refused.report(run, scope=harness.scope, inputs=True)
        assert str(harness.home) not in str(err.value)
        # Asked for nothing, a client without a store reports as before.
        assert (await without.report(run, scope=harness.scope)).model_calls == plain.model_calls

    requests = harness.fake.requests
    assert len(requests) == len(full.model_calls) == 3
    # By default each call names what it was sent by reference, and nothing is read.
    for call in plain.model_calls:
        assert call.context_ref is not None and call.system_ref is not None
        assert (call.system_prompt, call.messages) == (None, None)
    assert [c.context_blocks != () for c in plain.model_calls] == [False, True, False]

    # Asked, each call's own system prompt and messages, exactly as the model got them.
    for call, request in zip(full.model_calls, requests, strict=True):
        sent = request["messages"]
        assert sent[0]["role"] == "system"
        assert call.system_prompt == sent[0]["content"]
        assert call.messages is not None
        assert [wire_message(m) for m in call.messages] == sent[1:]
    first, middle, last = (c.system_prompt or "" for c in full.model_calls)
    assert len({first, middle, last}) == 3
    assert NOTE in middle and NOTE not in first + last
    assert "refund it" in middle and "refund it" not in first
    assert [len(c.messages or ()) for c in full.model_calls] == [1, 3, 5]

    # Only the asked turns are read.
    assert [c.messages is not None for c in second.model_calls] == [False, True, False]
    assert second.model_calls[1] == full.model_calls[1]


async def test_the_api_report_reads_inputs_when_asked(harness: Harness) -> None:
    spec = AgentBuilder("planner").instructions("Plan.").model("fake-model").tasks(True).build()
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("update_tasks", {"tasks": PLAN})), Reply.text("Planned.")
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "Plan a refund", scope=harness.scope)
        await harness.client.result(run, scope=harness.scope)
        path = f"/v1/runs/{run.workflow_id}/report"
        # The harness's client has no blob store: a 503 that says so, not an empty input.
        async with served(harness) as base, httpx.AsyncClient(base_url=base) as http:
            plain = (await http.get(path, headers=ACME)).json()
            refused = await http.get(path, params={"inputs": "true"}, headers=ACME)
            stray = await http.get(path, params={"turn": 2}, headers=ACME)
        blobs = harness.settings.blobs
        assert isinstance(blobs, LocalBlobStore)
        harness.client = reader(harness, blobs)
        async with served(harness) as base, httpx.AsyncClient(base_url=base) as http:
            asked = await http.get(path, params={"inputs": "true", "turn": 2}, headers=ACME)

    assert [c["messages"] for c in plain["model_calls"]] == [None, None]
    assert all(c["context_ref"] for c in plain["model_calls"])
    assert refused.status_code == 503
    problem = refused.json()
    assert problem["type"] == "urn:psych:problem:blobs-unavailable"
    assert "this client has none" in problem["detail"]
    assert stray.status_code == 422
    assert asked.status_code == 200
    first, second = asked.json()["model_calls"]
    assert (first["messages"], first["system_prompt"]) == (None, None)
    sent = harness.fake.requests[1]["messages"]
    assert second["system_prompt"] == sent[0]["content"]
    assert [m["role"] for m in second["messages"]] == [m["role"] for m in sent[1:]]


async def test_blobs_sealed_per_tenant_are_read_for_the_runs_tenant(harness: Harness) -> None:
    # Encrypted payloads: the worker seals each blob for its Run's tenant; a client of that
    # tenant opens them through the same keys (``tenant_sealed_blobs``), outside any Run.
    keys = Keyring(
        [Key("acme-1", "acme", os.urandom(32)), Key("globex-1", "globex", os.urandom(32))],
        {"acme": "acme-1", "globex": "globex-1"},
    )
    target = harness.env.client.service_client.config.target_host
    namespace = harness.env.client.namespace
    worker = await connect(target, namespace=namespace, codec=PsychCodec(keys))
    acme = await connect(target, namespace=namespace, codec=PsychCodec(keys.for_tenant("acme")))
    stored = harness.settings.blobs
    assert isinstance(stored, LocalBlobStore)
    client = PsychClient(
        acme,
        store=FileVersionStore(harness.home / "versions"),
        task_queue=harness.settings.task_queue,
        blobs=tenant_sealed_blobs(acme, stored),
    )
    spec = AgentBuilder("planner").instructions("Plan.").model("fake-model").tasks(True).build()
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("update_tasks", {"tasks": PLAN})), Reply.text("Planned.")
    )
    async with run_worker(worker, harness.settings):
        run = await client.dispatch(spec, "Plan a refund", scope=harness.scope)
        await client.result(run, scope=harness.scope)
        report = await client.report(run, scope=harness.scope, inputs=True)
        # Read as it is, a sealed blob is refused by name, not handed out as garbage.
        unopened = PsychClient(acme, store=client.store, blobs=stored)
        with pytest.raises(BlobsUnavailable, match="turn 1's model call input is stored sealed"):
            await unopened.report(run, scope=harness.scope, inputs=True)

    for call, request in zip(report.model_calls, harness.fake.requests, strict=True):
        assert call.system_prompt == request["messages"][0]["content"]
        assert [wire_message(m) for m in call.messages or ()] == request["messages"][1:]
    # Sealed: the store holds no plaintext under the ref, and another tenant opens nothing.
    ref = report.model_calls[0].system_ref
    assert ref is not None and b"Plan." not in await stored.get(ref)
    with pytest.raises(NotFound):
        await TenantSealedBlobs(stored, PsychCodec(keys).blob_cipher(), "globex").get(ref)


async def test_a_sealed_blob_that_does_not_open_is_no_missing_blob(harness: Harness) -> None:
    # From a review: the cipher's refusal (AccessDenied) reached the API's problem mapping,
    # which answers a Run's AccessDenied as that Run not found: a 404 "no Run", for a blob
    # that is there but sealed under other keys (or altered), the server's fault.
    secret = os.urandom(32)
    keys = Keyring([Key("acme-1", "acme", secret)], {"acme": "acme-1"})
    other = Keyring([Key("acme-1", "acme", os.urandom(32))], {"acme": "acme-1"})
    target = harness.env.client.service_client.config.target_host
    namespace = harness.env.client.namespace
    worker = await connect(target, namespace=namespace, codec=PsychCodec(keys))
    stored = harness.settings.blobs
    assert isinstance(stored, LocalBlobStore)
    # Its payloads decoded with the workers' keys, its blobs opened with another secret
    # under the same key id (a blob store's key configuration that is not the workers').
    cipher = PsychCodec(other).blob_cipher()
    harness.client = PsychClient(
        worker,
        store=FileVersionStore(harness.home / "versions"),
        task_queue=harness.settings.task_queue,
        blobs=lambda tenant: TenantSealedBlobs(stored, cipher, tenant),
    )
    spec = AgentBuilder("planner").instructions("Plan.").model("fake-model").build()
    harness.fake.enqueue(Reply.text("Planned."))
    async with run_worker(worker, harness.settings):
        run = await harness.client.dispatch(spec, "Plan a refund", scope=harness.scope)
        await harness.client.result(run, scope=harness.scope)
        with pytest.raises(BlobUnreadable) as raised:
            await harness.client.report(run, scope=harness.scope, inputs=True)
        path = f"/v1/runs/{run.workflow_id}/report"
        async with served(harness) as base, httpx.AsyncClient(base_url=base) as http:
            answer = await http.get(path, params={"inputs": "true"}, headers=ACME)
            plain = await http.get(path, headers=ACME)

    said = str(raised.value)
    assert said.startswith("turn 1's model call input is in the blob store but its seal does")
    assert "not the workers'" in said
    assert answer.status_code == 500, answer.text
    problem = answer.json()
    assert problem["type"] == "urn:psych:problem:blob-unreadable"
    assert problem["detail"] == said
    # Neither the key's id nor its secret, nor where the store is, reaches the caller.
    for private in ("acme-1", secret.hex(), str(stored.root)):
        assert private not in said and private not in answer.text
    assert plain.status_code == 200  # the Run itself is found


async def test_inputs_after_a_compaction_and_a_continue_as_new_are_what_was_sent(
    harness: Harness,
) -> None:
    # Compaction replaces the older turns with a summary (a user message), and the Run
    # continues as new after every turn: each call's inputs are still exactly its own.
    @harness.registry.register
    def lookup_order(order_id: str) -> str:
        """Look up an order.

        Args:
            order_id: The order's id.
        """
        return f"order {order_id}: shipped"

    spec = (
        AgentBuilder("compactor", registry=harness.registry)
        .instructions("Help with orders.")
        .model("fake-model")
        .tool(lookup_order)
        .compaction(100, keep_recent_turns=1, model="fake-other", max_summary_tokens=64)
        .build()
    )
    big, small = FakeUsage(input_tokens=300, output_tokens=5), FakeUsage(input_tokens=10)
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "41"}), usage=small),
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "42"}), usage=big),
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "43"}), usage=big),
        Reply.text("All shipped.", usage=big),
    )
    harness.fake.enqueue(
        Reply.text("41 shipped."), Reply.text("41 and 42 shipped."), model="fake-other"
    )
    blobs = harness.settings.blobs
    assert isinstance(blobs, LocalBlobStore)
    client = reader(harness, blobs)
    async with harness.worker():
        run = await client.dispatch(
            spec, "Status of my orders?", scope=harness.scope, continue_after_events=1
        )
        result = await client.result(run, scope=harness.scope)
        report = await client.report(run, scope=harness.scope, inputs=True)
        records = await all_records(client, run, harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    assert sum(isinstance(r, RunContinued) for r in records) >= 2, records
    assert len(report.compactions) == 2
    sent = [r for r in harness.fake.requests if r["model"] == "fake-model"]
    assert [c.turn for c in report.model_calls] == [1, 2, 3, 4]
    for call, request in zip(report.model_calls, sent, strict=True):
        assert call.system_prompt == request["messages"][0]["content"]
        assert [wire_message(m) for m in call.messages or ()] == request["messages"][1:]
    assert "41 shipped." in (report.model_calls[2].messages or ())[0].content


async def test_the_api_refuses_a_turn_with_no_model_call_and_another_tenants_run(
    harness: Harness,
) -> None:
    spec = AgentBuilder("planner").instructions("Plan.").model("fake-model").build()
    harness.fake.enqueue(Reply.text("Planned."))
    blobs = harness.settings.blobs
    assert isinstance(blobs, LocalBlobStore)
    harness.client = reader(harness, blobs)
    async with harness.worker():
        run = await harness.client.dispatch(spec, "Plan a refund", scope=harness.scope)
        await harness.client.result(run, scope=harness.scope)
        path = f"/v1/runs/{run.workflow_id}/report"
        async with served(harness) as base, httpx.AsyncClient(base_url=base) as http:
            missing = await http.get(path, params={"inputs": "true", "turn": 7}, headers=ACME)
            foreign = await http.get(path, params={"inputs": "true"}, headers=GLOBEX)
    # Before: a 200 whose calls had no inputs, as if turn 7's call had been sent nothing.
    assert missing.status_code == 422, missing.text
    assert missing.json()["detail"] == (
        "turn 7: the Run has no model call in turn 7 (its model calls are of turn 1)"
    )
    # Another tenant's Run is not found, inputs or not.
    assert foreign.status_code == 404
    assert "Plan a refund" not in foreign.text


async def test_a_workflows_agent_steps_report_their_calls_inputs(harness: Harness) -> None:
    # A workflow has no model call of its own: its agent steps' child Runs do, and the
    # report reads theirs (turn 2 of each step's Run when asked for turn 2).
    first = AgentBuilder("first").instructions("First, plan.").model("fake-model").tasks(True)
    second = AgentBuilder("second").instructions("Then answer.").model("fake-model")
    flow = (
        WorkflowBuilder("two-agents")
        .agent_step("plan", first.build())
        .agent_step("answer", second.build())
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("update_tasks", {"tasks": PLAN})),
        Reply.text("Planned."),
        Reply.text("Answered."),
    )
    blobs = harness.settings.blobs
    assert isinstance(blobs, LocalBlobStore)
    client = reader(harness, blobs)
    async with harness.worker():
        run = await client.dispatch(flow, "Refund order 42", scope=harness.scope)
        assert (await client.result(run, scope=harness.scope)).status is RunStatus.COMPLETED
        full = await client.report(run, scope=harness.scope, inputs=True)
        second_turns = await client.report(run, scope=harness.scope, inputs={2})
    children = [step.child for step in full.steps]
    assert all(child is not None for child in children)
    calls = [call for child in children if child is not None for call in child.model_calls]
    assert full.model_calls == () and len(calls) == 3
    for call, request in zip(calls, harness.fake.requests, strict=True):
        assert call.system_prompt == request["messages"][0]["content"]
        assert [wire_message(m) for m in call.messages or ()] == request["messages"][1:]
    read = [
        call.messages is not None
        for step in second_turns.steps
        if step.child is not None
        for call in step.child.model_calls
    ]
    assert read == [False, True, False]


async def test_a_threaded_runs_first_call_reports_the_earlier_conversation_it_was_sent(
    harness: Harness,
) -> None:
    # A Run continuing an earlier one's thread: its first call is sent the earlier
    # conversation (bounded by max_history_records) before its own input.
    agent = AgentBuilder("threaded").instructions("Help.").model("fake-model")
    harness.fake.enqueue(Reply.text("Order 42 has shipped."), Reply.text("Order 43 too."))
    blobs = harness.settings.blobs
    assert isinstance(blobs, LocalBlobStore)
    client = reader(harness, blobs)
    async with harness.worker():
        first = await client.dispatch(agent.build(), "Where is 42?", scope=harness.scope)
        await client.result(first, scope=harness.scope)
        later = agent.limits(max_history_records=1).build()
        run = await client.dispatch(later, "And 43?", scope=harness.scope, thread=first)
        await client.result(run, scope=harness.scope)
        report = await client.report(run, scope=harness.scope, inputs=True)
    assert report.thread is not None
    sent = harness.fake.requests[1:]
    assert len(report.model_calls) == len(sent) == 1
    for call, request in zip(report.model_calls, sent, strict=True):
        assert call.system_prompt == request["messages"][0]["content"]
        assert [wire_message(m) for m in call.messages or ()] == request["messages"][1:]
    assert [m.content for m in report.model_calls[0].messages or ()] == [
        "Order 42 has shipped.",
        "And 43?",
    ]


async def test_the_api_reads_the_inputs_of_at_most_twenty_calls_a_request(
    harness: Harness,
) -> None:
    # Each call's messages repeat the conversation before it: all of a long Run's inputs
    # at once grew with the square of its length, built in the server's memory.
    spec = AgentBuilder("planner").model("fake-model").tasks(True).build()
    harness.fake.enqueue(
        *[Reply.tool_calls(ToolCall("update_tasks", {"tasks": PLAN})) for _ in range(21)],
        Reply.text("Planned."),
    )
    blobs = harness.settings.blobs
    assert isinstance(blobs, LocalBlobStore)
    harness.client = reader(harness, blobs)
    async with harness.worker():
        run = await harness.client.dispatch(spec, "Plan a refund", scope=harness.scope)
        await harness.client.result(run, scope=harness.scope)
        path = f"/v1/runs/{run.workflow_id}/report"
        async with served(harness) as base, httpx.AsyncClient(base_url=base) as http:
            every = await http.get(path, params={"inputs": "true"}, headers=ACME)
            some = await http.get(path, params={"inputs": "true", "turn": [1, 22]}, headers=ACME)
    assert every.status_code == 413, every.text
    problem = every.json()
    assert problem["type"] == "urn:psych:problem:too-large"
    assert "inputs of 22 model calls asked: at most 20" in problem["detail"]
    assert some.status_code == 200, some.text
    calls = some.json()["model_calls"]
    assert [c["messages"] is not None for c in calls] == [True] + [False] * 20 + [True]
