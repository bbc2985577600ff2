"""Turning encryption on while a Run is open, on a real dev server: with
``PSYCH_CODEC_ACCEPT_PLAINTEXT`` the Run goes on, its plaintext blobs read as its plaintext
history is (``docs/guides/trust.md``, "Turning it on with Runs open")."""

from __future__ import annotations

import dataclasses
import os

import pytest

from psych_runtime.activities import FileVersionStore
from psych_runtime.activities.tools import RulePolicy
from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers import Key, Keyring, PsychCodec, connect, run_worker
from psych_runtime.workflows import PsychClient, RunStatus

from ._waiting import state_when
from .conftest import Harness

pytestmark = pytest.mark.e2e

KEYS = Keyring([Key("acme-1", "acme", os.urandom(32))], {"acme": "acme-1"})


async def test_a_run_started_before_encryption_completes_with_plaintext_accepted(
    harness: Harness,
) -> None:
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
    # Before: no encryption. The Run's history and its blobs are plaintext.
    async with run_worker(harness.env.client, settings):
        run = await harness.client.dispatch(spec, "delete 42", scope=harness.scope)
        await state_when(
            harness.client,
            run,
            harness.scope,
            lambda s: s.status is RunStatus.SUSPENDED,
            what="suspend",
        )
    # After: every process encrypts, and accepts plaintext until the old Runs settle.
    encrypted = await connect(
        harness.env.client.service_client.config.target_host,
        namespace=harness.env.client.namespace,
        codec=PsychCodec(KEYS, accept_plaintext=True),
    )
    client = PsychClient(
        encrypted,
        store=FileVersionStore(harness.home / "versions"),
        task_queue=settings.task_queue,
        registry=harness.registry,
    )
    async with run_worker(encrypted, settings):
        await client.approve(run, "call-del", scope=harness.scope)
        result = await client.result(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    assert result.answer == "Deleted order 42."
    assert deleted == ["42"]
