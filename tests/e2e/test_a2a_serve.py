"""Published agents served over A2A by ``psych serve``, driven by ``a2a-sdk``'s own client
against a real dev server: send, stream and resubscribe, get, list, cancel, input-required
round trips (a question, an approval), a push notification to a loopback webhook, another
tenant refused, and a stream whose JWT expires."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any

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
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
)
from a2a.utils.constants import TransportProtocol
from a2a.utils.errors import (
    InternalError,
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from cryptography.hazmat.primitives.asymmetric import rsa
from google.protobuf.json_format import MessageToDict

from psych_runtime.activities.egress import EgressRules, EgressSettings
from psych_runtime.activities.tools import RulePolicy
from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from tests._upstream import Answer, Request, url_of
from tests._upstream import serve as serve_upstream

from ._http_server import CountingServer
from ._serve import ACME, GLOBEX, jwks, jwt_bearer, jwt_settings, served
from ._waiting import eventually
from .conftest import Harness

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
        # Named apart from every other agent of the suite: ListTasks lists the tenant's Runs
        # of the agent on the session's one dev server (subagents named "helper" run too).
        AgentBuilder("a2a_desk")
        .model("fake-model")
        .description("Answers questions about orders.")
        .instructions("You help with orders.\n\nNever delete anything.")
        .build()
    )
    harness.client.publish(spec)
    harness.fake.enqueue(Reply.text("Order 42 ships today."))
    async with harness.worker(), served(harness) as base:
        async with httpx.AsyncClient(base_url=base) as http:
            card = (await http.get("/a2a/a2a_desk/.well-known/agent-card.json")).json()
            missing = await http.get("/a2a/nobody/.well-known/agent-card.json")
            unauthenticated = await http.post("/a2a/a2a_desk/", json={})
        assert card["name"] == "a2a_desk"
        assert card["capabilities"] == {"streaming": True, "pushNotifications": True}
        assert card["supportedInterfaces"][0]["url"] == f"{base}/a2a/a2a_desk/"
        assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "Bearer"
        assert missing.status_code == 404
        assert unauthenticated.status_code == 401
        assert unauthenticated.headers["www-authenticate"] == "Bearer"
        assert unauthenticated.json()["type"] == "urn:psych:problem:unauthorized"
        assert missing.json()["detail"] == "no published agent 'nobody'"

        async with a2a_client(base, "a2a_desk", ACME, streaming=False) as client:
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

            # Listing reads Temporal's visibility store, which lags on a loaded machine.
            await eventually(listed, within=60, what="the task to be listed")
        # The HTTP+JSON binding reaches the same task.
        async with a2a_client(base, "a2a_desk", ACME, streaming=False, rest=True) as client:
            got = await client.get_task(GetTaskRequest(id=task.id))
            assert got.status.state == TaskState.TASK_STATE_COMPLETED

        # Another tenant: the task is not found, and not listed.
        async with a2a_client(base, "a2a_desk", GLOBEX) as theirs:
            with pytest.raises(TaskNotFoundError, match=f"no task '{task.id}'"):
                await theirs.get_task(GetTaskRequest(id=task.id))
            with pytest.raises(TaskNotFoundError):
                await theirs.cancel_task(CancelTaskRequest(id=task.id))
            assert list((await theirs.list_tasks(ListTasksRequest())).tasks) == []
            with pytest.raises(TaskNotFoundError):
                await collect(theirs.send_message(user("mine now", task_id=task.id)))
            with pytest.raises(TaskNotFoundError):
                await theirs.subscribe(SubscribeToTaskRequest(id=task.id)).__anext__()
            hook = TaskPushNotificationConfig(task_id=task.id, url="http://127.0.0.1:9/")
            with pytest.raises(TaskNotFoundError):
                await theirs.create_task_push_notification_config(hook)


ANSWER = "Order 42 left the warehouse on Tuesday and reaches you on Thursday. " * 2


def texts(events: list[StreamResponse]) -> tuple[str, str]:
    """The streamed draft text and the final answer artifact of ``events``: sent as an
    update, or held by the task a stream starts with when the Run had already settled by
    then (a quick answer to a question can settle it before the reply is sent)."""
    draft = "".join(
        e.artifact_update.artifact.parts[0].text
        for e in events
        if e.HasField("artifact_update") and e.artifact_update.artifact.name == "draft"
    )
    artifacts = [
        artifact
        for e in events
        for artifact in (
            [e.artifact_update.artifact]
            if e.HasField("artifact_update")
            else e.task.artifacts
            if e.HasField("task")
            else []
        )
    ]
    answers = [a.parts[0].text for a in artifacts if a.artifact_id == "answer"]
    return draft, "".join(answers)


def status_of(event: StreamResponse) -> TaskStatus:
    """The status an event carries: a status update's, or the task's."""
    return event.status_update.status if event.HasField("status_update") else event.task.status


def last_status(events: list[StreamResponse]) -> TaskStatus:
    """The task's status at the end of ``events``: the last update's, or the task's a
    stream starts with when nothing followed it (it had already stopped there)."""
    return status_of(events[-1])


def states(events: list[StreamResponse]) -> list[int]:
    return [status_of(e).state for e in events if e.HasField("status_update") or e.HasField("task")]


async def test_a_stream_resumes_after_a_disconnect(harness: Harness) -> None:
    harness.client.publish(AgentBuilder("writer").model("fake-model").build())
    harness.fake.enqueue(Reply.text(ANSWER, chunk_size=6, chunk_seconds=PACE))
    async with (
        harness.worker(),
        served(harness) as base,
        a2a_client(base, "writer", ACME) as client,
    ):
        first: list[StreamResponse] = []
        stream = client.send_message(user("where is 42?"))
        assert isinstance(stream, AsyncGenerator)
        async for event in stream:
            first.append(event)
            if texts(first)[0]:  # some text streamed: drop the connection mid-answer
                break
        await stream.aclose()
        task_id = first[0].task.id
        assert first[0].task.status.state in (
            TaskState.TASK_STATE_SUBMITTED,
            TaskState.TASK_STATE_WORKING,
        )
        draft, answer = texts(first)
        assert draft and ANSWER.startswith(draft) and not answer

        resumed = await collect(client.subscribe(SubscribeToTaskRequest(id=task_id)))
        assert resumed[0].task.id == task_id  # a reconnect starts with the task as it is
        assert states(resumed)[-1] == TaskState.TASK_STATE_COMPLETED
        assert texts(resumed)[1] == ANSWER
        # The text kept streaming on the new connection before the answer arrived.
        assert texts(resumed)[0] and ANSWER.endswith(texts(resumed)[0][-12:])
        with pytest.raises(UnsupportedOperationError):  # an ended task has nothing to follow
            await collect(client.subscribe(SubscribeToTaskRequest(id=task_id)))


async def test_a_question_is_input_required_and_the_next_message_answers_it(
    harness: Harness,
) -> None:
    spec = AgentBuilder("asker").model("fake-model").suspension(may_ask_questions=True).build()
    harness.client.publish(spec)
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("ask_question", {"question": "Which order?"}, id="q1")),
        Reply.text("Order 7 it is."),
    )
    async with harness.worker(), served(harness) as base, a2a_client(base, "asker", ACME) as client:
        asked = await collect(client.send_message(user("cancel my order")))
        task_id = asked[0].task.id
        assert states(asked)[-1] == TaskState.TASK_STATE_INPUT_REQUIRED
        question = last_status(asked).message
        assert question.parts[0].text == "Which order?"
        assert MessageToDict(question.parts[1].data)["pending"]["reason"] == "question"
        got = await client.get_task(GetTaskRequest(id=task_id))
        assert got.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        assert got.status.message.parts[0].text == "Which order?"

        answered = await collect(client.send_message(user("number 7", task_id=task_id)))
        assert answered[0].task.id == task_id
        assert states(answered)[-1] == TaskState.TASK_STATE_COMPLETED
        assert texts(answered)[1] == "Order 7 it is."
        tool_results = [
            m["content"] for m in harness.fake.requests[-1]["messages"] if m["role"] == "tool"
        ]
        assert any("number 7" in str(content) for content in tool_results)
        # An ended task takes no more messages.
        with pytest.raises(InvalidParamsError, match="ended"):
            await collect(client.send_message(user("and 8?", task_id=task_id)))


async def test_a_reply_sent_again_under_its_message_id_answers_only_its_question(
    harness: Harness,
) -> None:
    spec = AgentBuilder("asker").model("fake-model").suspension(may_ask_questions=True).build()
    harness.client.publish(spec)
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("ask_question", {"question": "Which order?"}, id="q1")),
        Reply.tool_calls(ToolCall("ask_question", {"question": "Refund it?"}, id="q2")),
        Reply.text("Refunded order 7."),
    )
    async with harness.worker(), served(harness) as base, a2a_client(base, "asker", ACME) as client:
        task_id = (await collect(client.send_message(user("cancel my order"))))[0].task.id
        reply = user("number 7", task_id=task_id, message_id="reply-1")
        first = await collect(client.send_message(reply))
        assert last_status(first).message.parts[0].text == "Refund it?"
        # The same message again (its answer was lost, say): it answered "Which order?"
        # once, and is not taken as the answer to "Refund it?".
        again = await collect(client.send_message(reply))
        assert states(again)[-1] == TaskState.TASK_STATE_INPUT_REQUIRED
        assert last_status(again).message.parts[0].text == "Refund it?"
        done = await collect(client.send_message(user("yes", task_id=task_id)))
        assert states(done)[-1] == TaskState.TASK_STATE_COMPLETED
        # Again once the task ended: still taken as it was, not refused as too late.
        late = await collect(client.send_message(reply))
        assert states(late)[-1] == TaskState.TASK_STATE_COMPLETED
    answers = [m["content"] for m in harness.fake.requests[-1]["messages"] if m["role"] == "tool"]
    assert [("number 7" in a, "yes" in a) for a in answers] == [(True, False), (False, True)]


async def test_an_approval_is_answered_by_convention_and_a_waiting_task_is_canceled(
    harness: Harness,
) -> None:
    deleted: list[str] = []

    @harness.registry.register(destructive=True)
    def delete_order(order_id: str) -> str:
        """Delete an order for good."""
        deleted.append(order_id)
        return f"order {order_id} deleted"

    harness.settings.policy = RulePolicy(destructive="ask")
    spec = AgentBuilder("orders", registry=harness.registry).model("fake-model")
    harness.client.publish(spec.tool("delete_order").build())
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("delete_order", {"order_id": "42"}, id="call-1")),
        Reply.text("Deleted 42."),
        Reply.tool_calls(ToolCall("delete_order", {"order_id": "43"}, id="call-2")),
    )
    async with (
        harness.worker(),
        served(harness) as base,
        a2a_client(base, "orders", ACME) as client,
    ):
        asked = await collect(client.send_message(user("delete 42")))
        task_id = asked[0].task.id
        assert states(asked)[-1] == TaskState.TASK_STATE_INPUT_REQUIRED
        assert "delete_order" in last_status(asked).message.parts[0].text
        # A reply that is neither approve nor deny is refused; the task still waits.
        with pytest.raises(InvalidParamsError, match="'approve' or 'deny'"):
            await collect(client.send_message(user("maybe", task_id=task_id)))
        assert deleted == []
        approved = await collect(client.send_message(user("Approve", task_id=task_id)))
        assert states(approved)[-1] == TaskState.TASK_STATE_COMPLETED
        assert deleted == ["42"]

        # A second task waits on its approval; CancelTask aborts its Run.
        waiting = await collect(client.send_message(user("delete 43")))
        other = waiting[0].task.id
        assert states(waiting)[-1] == TaskState.TASK_STATE_INPUT_REQUIRED
        canceled = await client.cancel_task(CancelTaskRequest(id=other))
        assert canceled.status.state == TaskState.TASK_STATE_CANCELED
        got = await client.get_task(GetTaskRequest(id=other))
        assert got.status.state == TaskState.TASK_STATE_CANCELED
        assert deleted == ["42"]
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=other))
        state = await harness.client.status(f"psych-acme-{other}", scope=harness.scope)
        assert state.status == "aborted"


async def test_push_notifications_reach_a_registered_webhook(harness: Harness) -> None:
    harness.client.publish(AgentBuilder("notifier").model("fake-model").build())
    harness.fake.enqueue(Reply.text("All done.", chunk_seconds=PACE))
    webhook = CountingServer().start()
    try:
        async with (
            harness.worker(),
            served(harness) as base,
            a2a_client(base, "notifier", ACME, streaming=False) as client,
        ):
            refused = user("go")
            refused.configuration.task_push_notification_config.url = "file:///etc/passwd"
            with pytest.raises(InvalidParamsError, match="only http and https"):
                await collect(client.send_message(refused))
            # The cloud metadata address: the egress policy refuses it (the suite allows
            # loopback only), before any Run starts.
            metadata = user("go")
            metadata.configuration.task_push_notification_config.url = "http://169.254.169.254/"
            with pytest.raises(InvalidParamsError, match=r"egress refused: .*link-local"):
                await collect(client.send_message(metadata))

            request = user("go")
            request.configuration.return_immediately = True
            request.configuration.task_push_notification_config.CopyFrom(
                TaskPushNotificationConfig(url=f"{webhook.url}/hook", token="t0ken")
            )
            (sent,) = await collect(client.send_message(request))
            task_id = sent.task.id

            def pushed() -> list[dict[str, Any]]:
                return [json.loads(s.body) for s in webhook.seen if s.path == "/hook"]

            async def completed() -> bool:
                return any(
                    p.get("statusUpdate", {}).get("status", {}).get("state")
                    == "TASK_STATE_COMPLETED"
                    for p in pushed()
                )

            await eventually(completed, what="the completed status to be pushed")
            assert all(s.headers.get("x-a2a-notification-token") == "t0ken" for s in webhook.seen)
            answers = [p["artifactUpdate"]["artifact"] for p in pushed() if "artifactUpdate" in p]
            assert [a["parts"][0]["text"] for a in answers] == ["All done."]
            assert {p.get("statusUpdate", {}).get("taskId", task_id) for p in pushed()} == {task_id}
    finally:
        webhook.stop()


@asynccontextmanager
async def chatty_webhook(size: int) -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A webhook on loopback that answers every push 200 with ``size`` bytes of body and
    no length (read until the connection closes); its URL and the bodies it was pushed."""
    pushed: list[dict[str, Any]] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        pushed.append(json.loads(await reader.readexactly(length)))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n")
        writer.write(b"x" * size)
        with suppress(ConnectionError):  # we close first: the answer is not read
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/hook", pushed
    finally:
        server.close()


def ended(bodies: list[dict[str, Any]]) -> bool:
    """Whether a task's completed status is among these pushes."""
    return any(
        b.get("statusUpdate", {}).get("status", {}).get("state") == "TASK_STATE_COMPLETED"
        for b in bodies
    )


async def test_webhooks_are_judged_by_the_apps_egress_policy_and_redirects_not_followed(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """The app's egress settings (``ServeSettings.egress``: ``psych serve`` gives its
    settings file's) refuse a webhook at registration, naming the host and rule. At
    delivery a webhook's redirect is not followed (httpx would send the webhook's token,
    and a 307's update, to the host it names: here another origin the policy allows, so
    only not following keeps them from it), and a webhook's answer is not read: a long
    one (over the policy's ``max_response_bytes``) is a delivered push, not a failure."""
    caplog.set_level("WARNING", logger="psych_runtime.workers.serve.a2a")
    harness.client.publish(AgentBuilder("hooked").model("fake-model").build())
    harness.fake.enqueue(Reply.text("One."), Reply.text("Two."))
    elsewhere = CountingServer().start()
    moved: list[Request] = []

    def redirect(request: Request) -> Answer:
        moved.append(request)
        return Answer(307, "", headers=(("location", f"{elsewhere.url}/hook"),))

    mover = serve_upstream(redirect)
    egress = EgressSettings(
        rules=EgressRules.parse("127.0.0.1/32", deny="localhost"), max_response_bytes=1024
    )
    try:
        async with (
            chatty_webhook(4096) as (chatty, pushed),
            harness.worker(),
            served(harness, egress=egress) as base,
            a2a_client(base, "hooked", ACME, streaming=False) as client,
        ):
            denied = user("go")
            denied.configuration.task_push_notification_config.url = (
                f"http://localhost:{mover.server_address[1]}/hook"
            )
            with pytest.raises(
                InvalidParamsError,
                match=r"push notification url: egress refused: http://localhost:\d+/hook: "
                r"denied by the fleet's rule host localhost",
            ):
                await collect(client.send_message(denied))
            for url in (f"{url_of(mover)}/moved", chatty):
                request = user("go")
                request.configuration.return_immediately = True
                request.configuration.task_push_notification_config.CopyFrom(
                    TaskPushNotificationConfig(url=url, token="t0ken")
                )
                await collect(client.send_message(request))

            async def both_ended() -> bool:
                return ended([json.loads(r.body) for r in moved]) and ended(pushed)

            await eventually(both_ended, what="both tasks' ends to be pushed")
            await asyncio.sleep(0.5)  # a redirect followed would reach the other origin now
    finally:
        mover.shutdown()
        mover.server_close()
        elsewhere.stop()
    assert elsewhere.seen == []
    assert all(r.headers.get("x-a2a-notification-token") == "t0ken" for r in moved)
    # The webhook's own token, never the caller's credential (this config has no
    # authentication of its own: no Authorization at all).
    assert moved and not any("authorization" in r.headers for r in moved)
    failed = [r.getMessage() for r in caplog.records if "push notification to" in r.message]
    assert failed, "the redirect is a failed delivery"
    for message in failed:
        assert f"{url_of(mover)}/moved failed: answered 307, a redirect to" in message, message


async def test_a_stream_opened_with_a_jwt_ends_when_the_token_expires(harness: Harness) -> None:
    # The token is checked once, when the stream opens: a stream used to go on being sent
    # the task's updates for as long as it ran, its token long expired.
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    expired: list[dict[str, Any]] = []  # the data of each stream's error

    def bearer(expires: int) -> dict[str, str]:
        return jwt_bearer(key, harness.scope.tenant, expires)

    async def follow(stream: AsyncIterator[StreamResponse], into: list[StreamResponse]) -> float:
        """Read ``stream`` into ``into`` until it fails as its token expires; when it did."""

        async def read() -> None:
            async with asyncio.timeout(15):
                async for event in stream:
                    into.append(event)

        with pytest.raises(InternalError) as failed:
            await read()
        assert "has expired" in failed.value.message
        assert "SubscribeToTask" in failed.value.message
        assert failed.value.data is not None
        expired.append(failed.value.data)
        return time.time()

    harness.client.publish(AgentBuilder("a2a_expiring").model("fake-model").build())
    # About 21 s of text: the first token's life (at least 5 s, so the Run streams text
    # before it ends even on a loaded machine), the second's (at least 3 s), and the time
    # each stream takes to end after its exp all pass before the answer does.
    answer = ANSWER * 9
    harness.fake.enqueue(Reply.text(answer, chunk_size=6, chunk_seconds=0.1))
    sent: list[StreamResponse] = []
    resumed: list[StreamResponse] = []
    with jwks(key, "k1") as jwks_url:
        async with harness.worker(), served(harness, jwt_settings=jwt_settings(jwks_url)) as base:
            # SendStreamingMessage over JSON-RPC.
            first = int(time.time() + 6)
            async with a2a_client(base, "a2a_expiring", bearer(first)) as client:
                first_ended = await follow(client.send_message(user("where is 42?")), sent)
            task_id = sent[0].task.id
            # The expired token is refused before any stream starts.
            async with httpx.AsyncClient(headers=bearer(first)) as http:
                refused = await http.post(
                    f"{base}/a2a/a2a_expiring/",
                    json={
                        "jsonrpc": "2.0",
                        "id": 1,
                        "method": "SubscribeToTask",
                        "params": {"id": task_id},
                    },
                    headers={"A2A-Version": "1.0"},
                )
            # SubscribeToTask over HTTP+JSON with a fresh token, which expires in turn.
            second = int(time.time() + 4)
            async with a2a_client(base, "a2a_expiring", bearer(second), rest=True) as client:
                request = SubscribeToTaskRequest(id=task_id)
                second_ended = await follow(client.subscribe(request), resumed)
            async with a2a_client(base, "a2a_expiring", bearer(second + 300)) as client:
                rest = await collect(client.subscribe(SubscribeToTaskRequest(id=task_id)))
    problem = {"type": "urn:psych:problem:unauthorized", "status": "401"}
    assert expired == [
        {**problem, "expired_at": str(first)},
        {**problem, "expired_at": str(second)},
    ]
    # At the token's exp, not the task's end: the text was still streaming.
    assert first <= first_ended < first + 4
    assert second <= second_ended < second + 4
    assert texts(sent)[0] and not texts(sent)[1]
    assert resumed[0].task.id == task_id and not texts(resumed)[1]
    assert TaskState.TASK_STATE_COMPLETED not in states(sent) + states(resumed)
    assert refused.status_code == 401, refused.text
    assert refused.headers["www-authenticate"] == "Bearer"
    # A fresh token follows the task on to its end.
    assert states(rest)[-1] == TaskState.TASK_STATE_COMPLETED
    assert texts(rest)[1] == answer


async def test_a_blocking_send_answers_the_task_as_it_is_when_its_jwt_expires(
    harness: Harness,
) -> None:
    # A blocking SendMessage waited for the task's end however long it ran, its token long
    # expired. It now answers the working task at the token's exp; GetTask reads on.
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    harness.client.publish(AgentBuilder("a2a_blocking").model("fake-model").build())
    answer = ANSWER * 6  # about 14 s of text
    harness.fake.enqueue(Reply.text(answer, chunk_size=6, chunk_seconds=0.1))
    with jwks(key, "k1") as jwks_url:
        async with harness.worker(), served(harness, jwt_settings=jwt_settings(jwks_url)) as base:
            expires = int(time.time() + 3)
            bearer = jwt_bearer(key, harness.scope.tenant, expires)
            async with a2a_client(base, "a2a_blocking", bearer, streaming=False) as client:
                (sent,) = await collect(client.send_message(user("where is 42?")))
            answered = time.time()
            fresh = jwt_bearer(key, harness.scope.tenant, int(time.time() + 300))
            async with a2a_client(base, "a2a_blocking", fresh, streaming=False) as client:

                async def completed() -> bool:
                    got = await client.get_task(GetTaskRequest(id=sent.task.id))
                    return got.status.state == TaskState.TASK_STATE_COMPLETED

                await eventually(completed, within=60, what="the task to complete")
                got = await client.get_task(GetTaskRequest(id=sent.task.id))
    assert expires <= answered < expires + 2
    assert sent.task.status.state == TaskState.TASK_STATE_WORKING
    assert got.artifacts[0].parts[0].text == answer
