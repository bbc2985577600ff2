"""A scripted A2A peer for tests: ``a2a-sdk``'s own server classes on a loopback port.

``serve_peer(skills=...)`` runs uvicorn in the test's event loop and yields a ``Peer``
whose ``requests`` list every ``SendMessage`` that reached it (headers, tenant, message id,
text), so a test can count deliveries and see which credential was sent, and ``cancels`` every
task id a ``CancelTask`` named (with the credential it came with). Its task ids are
``task-1``, ``task-2``, ... in the order tasks are made. What the peer answers is decided by
the text it receives:

- ``ask:<question>``: the task goes ``input-required`` with that question; the next message
  in the task completes it with ``answered: <reply>`` (a reply ``slow:<seconds>`` after
  sleeping that long, so the task works on after the answer);
- ``big:<n>``: completes with an artifact of ``n`` characters;
- ``slowbig:<seconds>:<n>``: sleeps that long, then as ``big:<n>`` (a caller's hold over,
  its poller reads the answer);
- ``slow:<seconds>``: sleeps that long, then completes;
- ``later:<seconds>:<question>``: sleeps that long, then goes ``input-required``;
- ``fail``: the task fails with ``cannot do that``;
- ``slowfail:<seconds>``: sleeps that long, then fails with ``cannot do that``;
- ``auth:<what>``: the task goes ``auth-required`` asking for ``<what>``;
- anything else: completes with ``echo: <text>`` and a text artifact ``notes``.

Setting ``peer.down`` answers every request 503 (as a peer restarting would) until it is
cleared; the tasks are kept.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from a2a.helpers.proto_helpers import (
    get_message_text,
    new_task_from_user_message,
    new_text_message,
    new_text_part,
)
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.agent_execution.simple_request_context_builder import (
    SimpleRequestContextBuilder,
)
from a2a.server.events import EventQueue
from a2a.server.id_generator import IDGenerator, IDGeneratorContext
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import (
    BasePushNotificationSender,
    InMemoryPushNotificationConfigStore,
    InMemoryTaskStore,
    TaskUpdater,
)
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Role,
)
from starlette.applications import Starlette
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import Response

from tests._ports import free_port


@dataclass(frozen=True)
class Received:
    """One message that reached the peer."""

    text: str
    message_id: str
    task_id: str
    tenant: str
    authorization: str | None
    extensions: frozenset[str]
    skill: str | None
    push_url: str = ""
    """Where the caller asked for the task's updates to be pushed (empty: nowhere)."""
    push_token: str = ""
    """The token the caller asked its pushes to carry."""


@dataclass
class Peer:
    """A running scripted peer."""

    port: int
    requests: list[Received] = field(default_factory=list)
    cancels: list[tuple[str, str | None]] = field(default_factory=list)
    """(task id, Authorization header) of each ``CancelTask`` that reached the peer."""
    down: bool = False
    """While set, every request is answered 503 (a peer restarting), its tasks kept."""
    refused: int = 0
    """Requests answered 503 while ``down``."""

    @property
    def url(self) -> str:
        """The peer's base URL (its card is at ``/.well-known/agent-card.json``)."""
        return f"http://127.0.0.1:{self.port}"

    def texts(self) -> list[str]:
        """The texts received, in order."""
        return [r.text for r in self.requests]


class _Scripted(AgentExecutor):
    def __init__(self, peer: Peer) -> None:
        self.peer = peer

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        message = context.message
        assert message is not None and context.task_id and context.context_id
        text = get_message_text(message)
        headers: dict[str, Any] = context.call_context.state.get("headers", {})
        metadata = dict(message.metadata) if message.HasField("metadata") else {}
        skill = metadata.get("skill")
        self.peer.requests.append(
            Received(
                text=text,
                message_id=message.message_id,
                task_id=message.task_id,
                tenant=context.tenant,
                authorization=headers.get("authorization"),
                extensions=frozenset(context.requested_extensions),
                skill=skill if isinstance(skill, str) else None,
                push_url=context.configuration.task_push_notification_config.url
                if context.configuration is not None
                else "",
                push_token=context.configuration.task_push_notification_config.token
                if context.configuration is not None
                else "",
            )
        )
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        current = context.current_task
        if current is None:
            await event_queue.enqueue_event(new_task_from_user_message(message))
        await updater.start_work()

        def say(words: str) -> Any:
            return updater.new_agent_message([new_text_part(words)])

        if current is not None and current.status.message.parts:
            if text.startswith("slow:"):  # an answer the peer works on before it completes
                await asyncio.sleep(float(text.removeprefix("slow:")))
            await updater.complete(say(f"answered: {text}"))
        elif text.startswith("ask:"):
            await updater.requires_input(say(text.removeprefix("ask:")))
        elif text.startswith("big:"):
            await updater.add_artifact(
                [new_text_part("x" * int(text.removeprefix("big:")))], name="blob"
            )
            await updater.complete(say("here is the big one"))
        elif text.startswith("slowbig:"):
            seconds, _, size = text.removeprefix("slowbig:").partition(":")
            await asyncio.sleep(float(seconds))
            await updater.add_artifact([new_text_part("x" * int(size))], name="blob")
            await updater.complete(say("here is the slow big one"))
        elif text.startswith("later:"):
            seconds, _, question = text.removeprefix("later:").partition(":")
            await asyncio.sleep(float(seconds))
            await updater.requires_input(say(question))
        elif text.startswith("slow:"):
            await asyncio.sleep(float(text.removeprefix("slow:")))
            await updater.complete(say("done slowly"))
        elif text.startswith("auth:"):
            await updater.requires_auth(say(text.removeprefix("auth:")))
        elif text == "fail":
            await updater.failed(say("cannot do that"))
        elif text.startswith("slowfail:"):
            await asyncio.sleep(float(text.removeprefix("slowfail:")))
            await updater.failed(say("cannot do that"))
        else:
            await updater.add_artifact([new_text_part(f"notes on {text}")], name="notes")
            await updater.complete(say(f"echo: {text}"))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id and context.context_id
        headers: dict[str, Any] = context.call_context.state.get("headers", {})
        self.peer.cancels.append((context.task_id, headers.get("authorization")))
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


class _Numbered(IDGenerator):
    """Task ids ``task-1``, ``task-2``, ...: a test's scripted model can name them."""

    def __init__(self) -> None:
        self.count = 0

    def generate(self, context: IDGeneratorContext) -> str:
        self.count += 1
        return f"task-{self.count}"


def card(
    url: str,
    skills: tuple[str, ...],
    *,
    name: str = "scripted",
    push: bool = False,
    tenant: str = "",
) -> AgentCard:
    """The peer's Agent Card: one skill per id, JSON-RPC at ``url`` (``push``: it says it
    supports push notifications; ``tenant``: the tenant its interface asks requests for)."""
    return AgentCard(
        name=name,
        description="A scripted A2A peer for tests.",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(
                url=url + "/", protocol_binding="JSONRPC", protocol_version="1.0", tenant=tenant
            )
        ],
        capabilities=AgentCapabilities(streaming=False, push_notifications=push),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(id=s, name=s, description=f"The {s} skill.", tags=["test"]) for s in skills
        ],
    )


@asynccontextmanager
async def serve_peer(
    skills: tuple[str, ...] = ("echo",), *, push: bool = False, tenant: str = ""
) -> AsyncIterator[Peer]:
    """Run a scripted peer on a loopback port for the block (``push``: it supports push
    notifications, sending each task update to the URL a message asked for, with the
    SDK's own sender; ``tenant``: its card's interface names that tenant)."""
    peer = Peer(port=free_port())
    agent_card = card(peer.url, skills, push=push, tenant=tenant)
    store = InMemoryTaskStore()
    pushes = InMemoryPushNotificationConfigStore()
    sender_http = httpx.AsyncClient(timeout=10)
    handler = DefaultRequestHandler(
        agent_executor=_Scripted(peer),
        task_store=store,
        agent_card=agent_card,
        request_context_builder=SimpleRequestContextBuilder(
            task_store=store, task_id_generator=_Numbered()
        ),
        push_config_store=pushes if push else None,
        push_sender=BasePushNotificationSender(sender_http, pushes) if push else None,
    )
    app = Starlette(
        routes=[*create_agent_card_routes(agent_card), *create_jsonrpc_routes(handler, "/")]
    )

    async def unavailable(request: Request, call_next: RequestResponseEndpoint) -> Response:
        if peer.down:
            peer.refused += 1
            return Response("restarting", status_code=503)
        return await call_next(request)

    app.add_middleware(BaseHTTPMiddleware, dispatch=unavailable)
    config = uvicorn.Config(
        app, host="127.0.0.1", port=peer.port, log_level="warning", lifespan="off"
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.02)
    try:
        yield peer
    finally:
        server.should_exit = True
        await task
        await sender_http.aclose()


def user_message(text: str) -> Any:
    """A user message (for tests that drive the peer directly)."""
    return new_text_message(text, role=Role.ROLE_USER)
