"""Published agents served over A2A by ``psych serve``, driven by ``a2a-sdk``'s own client
against a real dev server."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
)
from a2a.utils.constants import TransportProtocol
from a2a.utils.errors import TaskNotFoundError

from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply

from ._waiting import eventually
from .conftest import Harness
from .test_serve import ACME, GLOBEX, served

pytestmark = pytest.mark.e2e

PACE = 0.05
"""Seconds between the fake model's chunks: slow enough to see the text stream."""


@asynccontextmanager
async def a2a_client(
    base: str, agent: str, headers: dict[str, str], *, streaming: bool = True, rest: bool = False
) -> AsyncIterator[Client]:
    """``a2a-sdk``'s client for the served agent, from its card, authenticated by ``headers``."""
    async with httpx.AsyncClient(headers=headers, timeout=60) as http:
        card = await A2ACardResolver(http, f"{base}/a2a/{agent}").get_agent_card()
        binding = TransportProtocol.HTTP_JSON if rest else TransportProtocol.JSONRPC
        config = ClientConfig(
            streaming=streaming, httpx_client=http, supported_protocol_bindings=[binding.value]
        )
        client = ClientFactory(config).create(card)
        yield client


def user(text: str, *, task_id: str = "", message_id: str | None = None) -> SendMessageRequest:
    return SendMessageRequest(
        message=Message(
            message_id=message_id or uuid.uuid4().hex,
            role=Role.ROLE_USER,
            task_id=task_id,
            parts=[Part(text=text)],
        )
    )


async def collect(stream: AsyncIterator[StreamResponse]) -> list[StreamResponse]:
    return [event async for event in stream]


def final_task(events: list[StreamResponse]) -> Task:
    (task,) = [e.task for e in events if e.HasField("task")]
    return task


async def test_send_get_and_list_a_served_agent(harness: Harness) -> None:
    spec = (
        AgentBuilder("helper")
        .model("fake-model")
        .description("Answers questions about orders.")
        .instructions("You help with orders.\n\nNever delete anything.")
        .build()
    )
    harness.client.publish(spec)
    harness.fake.enqueue(Reply.text("Order 42 ships today."))
    async with harness.worker(), served(harness) as base:
        async with httpx.AsyncClient(base_url=base) as http:
            card = (await http.get("/a2a/helper/.well-known/agent-card.json")).json()
            missing = await http.get("/a2a/nobody/.well-known/agent-card.json")
            unauthenticated = await http.post("/a2a/helper/", json={})
        assert card["name"] == "helper"
        assert card["capabilities"] == {"streaming": True, "pushNotifications": True}
        assert card["supportedInterfaces"][0]["url"] == f"{base}/a2a/helper/"
        assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "Bearer"
        assert missing.status_code == 404
        assert unauthenticated.status_code == 401
        assert unauthenticated.headers["www-authenticate"] == "Bearer"

        async with a2a_client(base, "helper", ACME, streaming=False) as client:
            message_id = uuid.uuid4().hex
            (sent,) = await collect(client.send_message(user("when?", message_id=message_id)))
            task = sent.task
            assert task.status.state == TaskState.TASK_STATE_COMPLETED
            assert [a.parts[0].text for a in task.artifacts] == ["Order 42 ships today."]
            # The same message again reaches the same task (one message id, one Run).
            (again,) = await collect(client.send_message(user("when?", message_id=message_id)))
            assert again.task.id == task.id
            got = await client.get_task(GetTaskRequest(id=task.id))
            assert got.status.state == TaskState.TASK_STATE_COMPLETED
            assert got.artifacts[0].parts[0].text == "Order 42 ships today."

            async def listed() -> bool:
                tasks = (await client.list_tasks(ListTasksRequest())).tasks
                return [t.id for t in tasks] == [task.id]

            await eventually(listed, what="the task to be listed")
        # The HTTP+JSON binding reaches the same task.
        async with a2a_client(base, "helper", ACME, streaming=False, rest=True) as client:
            got = await client.get_task(GetTaskRequest(id=task.id))
            assert got.status.state == TaskState.TASK_STATE_COMPLETED

        # Another tenant: the task is not found, and not listed.
        async with a2a_client(base, "helper", GLOBEX, streaming=False) as theirs:
            with pytest.raises(TaskNotFoundError, match=f"no task '{task.id}'"):
                await theirs.get_task(GetTaskRequest(id=task.id))
            with pytest.raises(TaskNotFoundError):
                await theirs.cancel_task(CancelTaskRequest(id=task.id))
            assert list((await theirs.list_tasks(ListTasksRequest())).tasks) == []
