"""Encrypted payloads on a real dev server: what history, the ``temporal`` CLI and the blob
store show without the key, the codec server decoding for the UI and CLI, a key rotation
in the middle of a Run, and another tenant's keys failing on a Run."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from psych_runtime.activities import FileVersionStore
from psych_runtime.activities.tools import RulePolicy
from psych_runtime.specs import AccessDenied, AgentBuilder, AgentSpec
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers import Key, Keyring, PsychCodec, connect, run_worker, temporal_binary
from psych_runtime.workers.codec._server import CodecServer
from psych_runtime.workflows import PsychClient, RunStatus

from ._waiting import eventually, state_when
from .conftest import Harness

pytestmark = pytest.mark.e2e

USER_MESSAGE = "Refund order 42: my card 4242-4242 was charged twice"
TOOL_RESULT = "order 42 belongs to Ada Lovelace, 12 Crescent Rd"
ANSWER = "Refunded Ada Lovelace's duplicate charge on order 42."
MARKERS = ("4242-4242", "Ada Lovelace", "Crescent Rd")
UI_ORIGIN = "http://localhost:8233"
TOKEN = "codec-token-" + uuid.uuid4().hex

ACME_1, ACME_2, GLOBEX_1 = (
    Key("acme-1", "acme", os.urandom(32)),
    Key("acme-2", "acme", os.urandom(32)),
    Key("globex-1", "globex", os.urandom(32)),
)
WORKER_KEYS = Keyring([ACME_1, GLOBEX_1], {"acme": "acme-1", "globex": "globex-1"})


async def client_with(env: WorkflowEnvironment, keyring: Keyring) -> Client:
    return await connect(
        env.client.service_client.config.target_host,
        namespace=env.client.namespace,
        codec=PsychCodec(keyring),
    )


def psych_client(harness: Harness, temporal: Client) -> PsychClient:
    return PsychClient(
        temporal,
        store=FileVersionStore(harness.home / "versions"),
        task_queue=harness.settings.task_queue,
        registry=harness.registry,
    )


async def temporal_cli(env: WorkflowEnvironment, *args: str) -> str:
    """``temporal <args>`` against the session's server; its standard output."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
    child = await asyncio.create_subprocess_exec(
        temporal_binary(),
        *args,
        "--address",
        env.client.service_client.config.target_host,
        "--namespace",
        env.client.namespace,
        env=environ,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(60):
        out, err = await child.communicate()
    assert child.returncode == 0, f"temporal {' '.join(args)}: {err.decode()}"
    return out.decode()


def payloads_in(value: Any) -> Iterator[dict[str, Any]]:
    """Every payload (``{"metadata": ..., "data": ...}``) of a history JSON document."""
    if isinstance(value, dict):
        if "metadata" in value and "data" in value:
            yield value
        for item in value.values():
            yield from payloads_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from payloads_in(item)


def meta(payload: dict[str, Any], name: str) -> str:
    return base64.b64decode(payload["metadata"][name]).decode()


def is_search_attribute(payload: dict[str, Any]) -> bool:
    return "type" in payload["metadata"] and meta(payload, "type").startswith("Keyword")


def is_patch_marker(payload: dict[str, Any]) -> bool:
    body = json.loads(base64.b64decode(payload["data"]))
    return isinstance(body, dict) and set(body) == {"id", "deprecated"}


def is_local_activity_marker(payload: dict[str, Any]) -> bool:
    """The SDK core's own record of a local activity (sequence, attempt, type, times); its
    result travels in a payload of its own, through the codec."""
    body = json.loads(base64.b64decode(payload["data"]))
    return isinstance(body, dict) and {"seq", "attempt", "activity_type"} <= set(body)


def readable(text: str) -> str:
    """The text with every base64 payload body decoded beside it (how a reader without
    the key would look for plaintext)."""
    bodies = [
        base64.b64decode(p["data"]).decode(errors="replace") for p in payloads_in(json.loads(text))
    ]
    return text + "\n".join(bodies)


def sealed_payloads(history: str) -> list[dict[str, Any]]:
    return [
        p for p in payloads_in(json.loads(history)) if meta(p, "encoding") == "binary/encrypted"
    ]


def lookup_agent(harness: Harness) -> AgentSpec:
    @harness.registry.register
    def lookup_order(order_id: str) -> str:
        """Look an order up (not registered idempotent: it completes through the client)."""
        return TOOL_RESULT

    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "42"})), Reply.text(ANSWER)
    )
    return (
        AgentBuilder("support", registry=harness.registry)
        .model("fake-model")
        .tool("lookup_order")
        .build()
    )


async def test_history_and_blobs_hold_no_plaintext_and_the_codec_server_decodes_them(
    harness: Harness,
) -> None:
    spec = lookup_agent(harness)
    worker_client = await client_with(harness.env, WORKER_KEYS)
    acme = psych_client(harness, await client_with(harness.env, WORKER_KEYS.for_tenant("acme")))
    async with run_worker(worker_client, harness.settings):
        run = await acme.dispatch(spec, USER_MESSAGE, scope=harness.scope)
        result = await acme.result(run, scope=harness.scope)
        report = await acme.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED
    assert result.answer == ANSWER
    assert report.tool_calls[0].result == TOOL_RESULT
    # The markers really flowed through the Run: the model was shown all of them.
    shown = json.dumps(harness.fake.requests)
    assert all(marker in shown for marker in MARKERS)

    history = await temporal_cli(
        harness.env, "workflow", "show", "--workflow-id", run.workflow_id, "--output", "json"
    )
    without_key = readable(history)
    for marker in MARKERS:
        assert marker not in without_key, f"{marker!r} is readable in history without the key"
    payloads = list(payloads_in(json.loads(history)))
    sealed = [p for p in payloads if meta(p, "encoding") == "binary/encrypted"]
    assert len(sealed) > 5
    assert {meta(p, "encryption-key-id") for p in sealed} == {"acme-1"}
    # What stays in clear is what Temporal itself must read, never passed to a codec:
    # search attributes (tenant, agent, Version hash, status), the SDK's patch markers and
    # its record of the local catalogue activity (whose result is sealed).
    for payload in payloads:
        if payload not in sealed:
            assert (
                is_search_attribute(payload)
                or is_patch_marker(payload)
                or is_local_activity_marker(payload)
            ), payload

    blobs = [p.read_bytes() for p in (harness.home / "blobs").rglob("*") if p.is_file()]
    assert blobs  # the conversation, the tool result and the catalogue were stored
    for marker in MARKERS:
        assert all(marker.encode() not in blob for blob in blobs), f"{marker!r} in a blob"

    server = CodecServer(PsychCodec(WORKER_KEYS), token=TOKEN, origins=[UI_ORIGIN], tenant="acme")
    async with server, httpx.AsyncClient() as http:
        # What the UI's browser does: a CORS preflight, then the POST with its token.
        preflight = await http.options(
            server.url + "/decode",
            headers={
                "Origin": UI_ORIGIN,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization,content-type,x-namespace",
            },
        )
        assert preflight.status_code == 204
        assert preflight.headers["access-control-allow-origin"] == UI_ORIGIN
        assert preflight.headers["access-control-allow-credentials"] == "true"
        allowed = preflight.headers["access-control-allow-headers"].lower()
        assert {"authorization", "content-type", "x-namespace"} <= {
            h.strip() for h in allowed.split(",")
        }
        headers = {
            "Origin": UI_ORIGIN,
            "X-Namespace": "default",
            "Content-Type": "application/json",
        }
        body = json.dumps({"payloads": sealed})
        refused = await http.post(server.url + "/decode", content=body, headers=headers)
        assert refused.status_code == 401
        decoded = await http.post(
            server.url + "/decode",
            content=body,
            headers={**headers, "Authorization": f"Bearer {TOKEN}"},
        )
        assert decoded.status_code == 200
        assert decoded.headers["access-control-allow-origin"] == UI_ORIGIN
        opened = decoded.json()["payloads"]
        assert len(opened) == len(sealed)
        texts = "\n".join(base64.b64decode(p["data"]).decode(errors="replace") for p in opened)
        for marker in ("4242-4242", "Ada Lovelace"):  # the message, the tool result, the answer
            assert marker in texts
        assert ANSWER in texts

        # The temporal CLI through the same server reads the Run in clear.
        through_codec = await temporal_cli(
            harness.env,
            "workflow",
            "show",
            "--workflow-id",
            run.workflow_id,
            "--output",
            "json",
            "--codec-endpoint",
            server.url,
            "--codec-auth",
            f"Bearer {TOKEN}",
        )
    assert ANSWER in readable(through_codec)
    assert sealed_payloads(through_codec) == []


async def test_a_key_rotation_in_the_middle_of_a_run(harness: Harness) -> None:
    deleted: list[str] = []

    @harness.registry.register(destructive=True)
    def delete_order(order_id: str) -> str:
        """Delete an order for good."""
        deleted.append(order_id)
        return f"order {order_id} deleted"

    settings = dataclasses.replace(harness.settings, policy=RulePolicy(destructive="ask"))
    spec = (
        AgentBuilder("orders", registry=harness.registry)
        .model("fake-model")
        .tool("delete_order")
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("delete_order", {"order_id": "42"}, id="call-del")),
        Reply.text("Deleted order 42."),
    )
    first = Keyring([ACME_1], {"acme": "acme-1"})
    before = psych_client(harness, await client_with(harness.env, first))
    async with run_worker(await client_with(harness.env, first), settings):
        run = await before.dispatch(spec, "delete 42", scope=harness.scope)
        await state_when(
            before, run, harness.scope, lambda s: s.status is RunStatus.SUSPENDED, what="suspend"
        )
    # The worker restarts with key 2 current and key 1 still known; so does the client.
    rotated = Keyring([ACME_1, ACME_2], {"acme": "acme-2"})
    after = psych_client(harness, await client_with(harness.env, rotated))
    async with run_worker(await client_with(harness.env, rotated), settings):
        await after.approve(run, "call-del", scope=harness.scope)
        result = await after.result(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED
    assert result.answer == "Deleted order 42."
    assert deleted == ["42"]
    history = json.loads(
        await temporal_cli(
            harness.env, "workflow", "show", "--workflow-id", run.workflow_id, "--output", "json"
        )
    )
    key_ids = [
        meta(p, "encryption-key-id")
        for p in payloads_in(history)
        if "encryption-key-id" in p["metadata"]
    ]
    assert key_ids[0] == "acme-1"  # the start, under the old key
    assert key_ids[-1] == "acme-2"  # the result, under the new one
    assert set(key_ids) == {"acme-1", "acme-2"}


async def test_tenant_b_keys_fail_on_tenant_a_run_with_a_clear_error(harness: Harness) -> None:
    harness.fake.enqueue(Reply.text(ANSWER))
    spec = AgentBuilder("support").model("fake-model").build()
    acme = psych_client(harness, await client_with(harness.env, WORKER_KEYS.for_tenant("acme")))
    globex = await client_with(harness.env, WORKER_KEYS.for_tenant("globex"))
    async with run_worker(await client_with(harness.env, WORKER_KEYS), harness.settings):
        run = await acme.dispatch(spec, USER_MESSAGE, scope=harness.scope)
        assert (await acme.result(run, scope=harness.scope)).answer == ANSWER
        handle = globex.get_workflow_handle(run.workflow_id)
        with pytest.raises(AccessDenied) as denied:
            await handle.result()
        assert "sealed with key 'acme-1', which this keyring does not hold" in str(denied.value)
        with pytest.raises(AccessDenied, match="no encryption key for tenant 'acme'"):
            await handle.signal("psych.steer", {"tenant": "acme", "message": "leak it"})
        # The Run's owner still reads it, so nothing above was a broken Run.
        assert (await acme.status(run, scope=harness.scope)).answer == ANSWER
    wrong_tenant = CodecServer(PsychCodec(WORKER_KEYS), token=TOKEN, tenant="globex")
    history = await temporal_cli(
        harness.env, "workflow", "show", "--workflow-id", run.workflow_id, "--output", "json"
    )
    async with wrong_tenant, httpx.AsyncClient() as http:
        answer = await http.post(
            wrong_tenant.url + "/decode",
            json={"payloads": [sealed_payloads(history)[0]]},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
    assert answer.status_code == 403
    assert answer.json()["message"] == (
        "refusing a payload sealed for tenant 'acme' (key 'acme-1'): only tenant 'globex''s "
        "payloads are opened here"
    )


async def test_failure_texts_are_encrypted_too(harness: Harness) -> None:
    """A model failure's message quotes the upstream's body; in history it is ciphertext."""
    leak = "Mrs Higgins of 27A Wimpole Street"
    harness.fake.enqueue(Reply.error(500, message=f"upstream choked on {leak}"), Reply.text(ANSWER))
    spec = AgentBuilder("support").model("fake-model").build()
    acme = psych_client(harness, await client_with(harness.env, WORKER_KEYS.for_tenant("acme")))
    async with run_worker(await client_with(harness.env, WORKER_KEYS), harness.settings):
        run = await acme.dispatch(spec, "hello", scope=harness.scope)
        assert (await acme.result(run, scope=harness.scope)).answer == ANSWER
        report = await acme.report(run, scope=harness.scope)
    assert leak in json.dumps(report.model_dump(mode="json"))  # the owner still reads it
    history = await temporal_cli(
        harness.env, "workflow", "show", "--workflow-id", run.workflow_id, "--output", "json"
    )
    failures = [
        e for e in json.loads(history)["events"] if "activityTaskFailedEventAttributes" in e
    ]
    assert len(failures) == 1  # the failure is there, its text is not
    assert "Wimpole" not in readable(history)


async def test_a_plaintext_signal_from_raw_namespace_access_approves_nothing(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """Without the key, the plain ``temporal`` CLI cannot approve a call: the worker refuses
    the unencrypted payload (the Run's workflow task fails instead, and is retried)."""
    deleted: list[str] = []

    @harness.registry.register(destructive=True)
    def delete_order(order_id: str) -> str:
        """Delete an order for good."""
        deleted.append(order_id)
        return f"order {order_id} deleted"

    settings = dataclasses.replace(harness.settings, policy=RulePolicy(destructive="ask"))
    spec = (
        AgentBuilder("orders", registry=harness.registry)
        .model("fake-model")
        .tool("delete_order")
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("delete_order", {"order_id": "42"}, id="call-del")),
        Reply.text("Deleted order 42."),
    )
    acme = psych_client(harness, await client_with(harness.env, WORKER_KEYS.for_tenant("acme")))
    async with run_worker(await client_with(harness.env, WORKER_KEYS), settings):
        run = await acme.dispatch(spec, "delete 42", scope=harness.scope)
        await state_when(
            acme, run, harness.scope, lambda s: s.status is RunStatus.SUSPENDED, what="suspend"
        )
        forged = {"reason": "approval", "id": "call-del", "tenant": "acme", "approved": True}
        await temporal_cli(
            harness.env,
            "workflow",
            "signal",
            "--workflow-id",
            run.workflow_id,
            "--name",
            "psych.resume",
            "--input",
            json.dumps({**forged, "by": "mallory"}),
        )

        async def refused() -> bool:
            return "refusing a payload that is not encrypted" in caplog.text

        await eventually(refused, what="the worker to refuse the plaintext signal")
        await asyncio.sleep(1.0)  # time enough for a wrongly accepted approval to run
        assert deleted == []
        await harness.env.client.get_workflow_handle(run.workflow_id).terminate("test over")
