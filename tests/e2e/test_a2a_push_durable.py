"""``psych serve``'s push notification configurations are kept in the fleet's TokenStore:
two served apps (each its own registry, as two ``psych serve`` processes) sharing one store
directory both see a webhook registered at one of them, and when the one delivering stops,
the other takes the task over and pushes its end to the webhook. A real dev server, a
worker, ``a2a-sdk``'s own client, a loopback webhook."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import uvicorn
from a2a.types import ListTaskPushNotificationConfigsRequest, TaskPushNotificationConfig
from fastapi import FastAPI

from psych_runtime.activities.tokens import LocalTokenStore
from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers import run_worker
from psych_runtime.workers._worker_checks import tenant_sealed_tokens
from psych_runtime.workers.serve import ApiKey, AuthSettings, ServeSettings, create_app
from psych_runtime.workers.serve.a2a import PushStore, Watched
from psych_runtime.workflows import PsychClient, RunStatus

from ._http_server import CountingServer
from ._reset import reset_to_first_task
from ._serve import ACME
from ._waiting import eventually, is_waiting
from .conftest import Harness
from .test_a2a_serve import a2a_client, collect, user
from .test_encryption import WORKER_KEYS, client_with, psych_client

pytestmark = pytest.mark.e2e


@asynccontextmanager
async def serving(
    harness: Harness, tokens: Path, client: PsychClient | None = None
) -> AsyncIterator[tuple[str, FastAPI]]:
    """One served app (one ``psych serve`` process's worth) keeping its push
    configurations in ``tokens`` (sealed as ``psych serve`` seals them when ``client``,
    default the harness's, encrypts); stopped (and its watchers closed) after the block."""
    client = client or harness.client
    settings = ServeSettings(
        client,
        AuthSettings((ApiKey.of("acme-key-e2e", harness.scope.tenant, "alice"),)),
        push_tokens=tenant_sealed_tokens(client.temporal, LocalTokenStore(tokens)),
        push_lease_seconds=1.0,
    )
    app = create_app(settings)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    task = asyncio.create_task(server.serve())

    async def started() -> bool:
        return server.started

    await eventually(started, what="uvicorn to listen")
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", app
    finally:
        server.should_exit = True
        await task  # its shutdown closes its push registry


def states(webhook: CountingServer) -> list[str]:
    """The task state of each update ``webhook`` got at /hook, in order ("" for others)."""
    pushed = [json.loads(s.body) for s in webhook.seen if s.path == "/hook"]
    return [p.get("statusUpdate", {}).get("status", {}).get("state", "") for p in pushed]


def answers(webhook: CountingServer) -> list[str]:
    """The text of each answer artifact ``webhook`` got at /hook, in order."""
    pushed = [json.loads(s.body) for s in webhook.seen if s.path == "/hook"]
    artifacts = [p["artifactUpdate"]["artifact"] for p in pushed if "artifactUpdate" in p]
    return [a["parts"][0]["text"] for a in artifacts if a.get("artifactId") == "answer"]


def publish_asking(harness: Harness, name: str, *then: Reply) -> None:
    """Publish an agent ``name`` that may ask its caller questions; its model asks "Which
    day?" (question ``q1``), then answers with ``then`` (default: "Tuesday it is.")."""
    harness.client.publish(
        AgentBuilder(name).model("fake-model").suspension(may_ask_questions=True).build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("ask_question", {"question": "Which day?"}, id="q1")),
        *(then or (Reply.text("Tuesday it is."),)),
    )


async def send_with_webhook(base: str, agent: str, webhook: str) -> str:
    """Send ``agent`` served at ``base`` a message whose task pushes to ``webhook``/hook
    (token ``t0ken``), without waiting; its task id."""
    async with a2a_client(base, agent, ACME, streaming=False) as client:
        request = user("Book a meeting")
        request.configuration.return_immediately = True
        request.configuration.task_push_notification_config.CopyFrom(
            TaskPushNotificationConfig(url=f"{webhook}/hook", token="t0ken")
        )
        (sent,) = await collect(client.send_message(request))
        return sent.task.id


async def test_push_configs_are_shared_and_taken_over_when_a_server_stops(
    harness: Harness, tmp_path: Path
) -> None:
    publish_asking(harness, "durable_notifier")
    tokens = tmp_path / "tokens"
    webhook = CountingServer().start()

    try:
        async with harness.worker(), serving(harness, tokens) as (second, _):
            async with serving(harness, tokens) as (first, _):
                task_id = await send_with_webhook(first, "durable_notifier", webhook.url)
                run = f"psych-{harness.scope.tenant}-{task_id}"

                async def waiting() -> bool:
                    return is_waiting(await harness.client.status(run, scope=harness.scope))

                await eventually(waiting, what="the Run to wait on its question")

                async def asked() -> bool:
                    return "TASK_STATE_INPUT_REQUIRED" in states(webhook)

                await eventually(asked, what="input-required pushed by the first server")
                # Registered at the first server, listed by the second: one shared store.
                async with a2a_client(second, "durable_notifier", ACME, streaming=False) as two:
                    listed = await two.list_task_push_notification_configs(
                        ListTaskPushNotificationConfigsRequest(task_id=task_id)
                    )
                assert [(c.url, c.token) for c in listed.configs] == [
                    (f"{webhook.url}/hook", "t0ken")
                ]
            # The first server stopped. Its task is the second's once that one looks (on
            # a request, at most every lease): then its end reaches the webhook.
            before = len(states(webhook))
            await harness.client.answer(run, "q1", "Tuesday", scope=harness.scope)
            result = await asyncio.wait_for(harness.client.result(run, scope=harness.scope), 90)
            assert result.status is RunStatus.COMPLETED, result.reason

            async def completed() -> bool:
                async with a2a_client(second, "durable_notifier", ACME, streaming=False) as two:
                    await two.list_task_push_notification_configs(
                        ListTaskPushNotificationConfigsRequest(task_id=task_id)
                    )
                return "TASK_STATE_COMPLETED" in states(webhook)[before:]

            await eventually(completed, within=60, what="the second server to push the end")
            # The Run ended before the second server took it over: its answer is pushed
            # too, before the end, as a watcher that saw the end pushes it.
            assert answers(webhook) == ["Tuesday it is."]

            # Its end pushed, the task's webhooks (and their credentials) are forgotten.
            async def forgotten() -> bool:
                async with a2a_client(second, "durable_notifier", ACME, streaming=False) as two:
                    listed = await two.list_task_push_notification_configs(
                        ListTaskPushNotificationConfigsRequest(task_id=task_id)
                    )
                return not listed.configs

            await eventually(forgotten, within=30, what="the ended task's webhooks forgotten")
        assert all(s.headers.get("x-a2a-notification-token") == "t0ken" for s in webhook.seen)
    finally:
        webhook.stop()


async def test_a_task_whose_run_is_gone_is_taken_over_as_ended(
    harness: Harness, tmp_path: Path
) -> None:
    # A process stopped while delivering a task whose Run is now gone (past the namespace's
    # retention): the next process to look forgets it instead of retrying it forever.
    tokens = tmp_path / "tokens"
    store = PushStore(LocalTokenStore(tokens))
    tenant = harness.scope.tenant
    gone = f"psych-{tenant}-gone0000"

    def add(configs: dict[str, TaskPushNotificationConfig]) -> bool:
        configs["c1"] = TaskPushNotificationConfig(url="http://127.0.0.1:9/hook", id="c1")
        return True

    await store.change(tenant, gone, add)
    await store.watch([Watched(tenant, "alice", gone, owner="stopped", beat=0.0)])
    harness.client.publish(AgentBuilder("looker").model("fake-model").build())
    async with serving(harness, tokens) as (base, _):

        async def forgotten() -> bool:
            async with a2a_client(base, "looker", ACME, streaming=False):
                pass  # fetching the card makes the process look for tasks to take over
            return not await store.watched() and not await store.configs(tenant, gone)

        await eventually(forgotten, within=30, what="the gone task to be forgotten")


async def test_a_task_that_ended_is_taken_over_with_no_worker_from_its_closed_execution(
    harness: Harness, tmp_path: Path
) -> None:
    # A process stopped while delivering a task that has ended since, and no worker polls:
    # the next process pushes its end as its closed execution shows it, at once. Its status
    # was a query a worker answers: the watcher waited the query timeout (10 s) and failed,
    # again at every look, and nothing reached the webhook.
    version = harness.client.publish(AgentBuilder("ended_notifier").model("fake-model").build())
    harness.fake.enqueue(Reply.text("Tuesday it is."))
    async with harness.worker():
        run = await harness.client.dispatch(version, "Book a meeting", scope=harness.scope)
        await harness.client.result(run, scope=harness.scope)
    tokens = tmp_path / "tokens"
    store = PushStore(LocalTokenStore(tokens))
    tenant = harness.scope.tenant
    webhook = CountingServer().start()

    def add(configs: dict[str, TaskPushNotificationConfig]) -> bool:
        configs["c1"] = TaskPushNotificationConfig(url=f"{webhook.url}/hook", id="c1")
        return True

    await store.change(tenant, run.workflow_id, add)
    await store.watch([Watched(tenant, "alice", run.workflow_id, owner="stopped", beat=0.0)])
    try:
        async with serving(harness, tokens) as (base, _):

            async def pushed() -> bool:
                async with a2a_client(base, "ended_notifier", ACME, streaming=False):
                    pass  # fetching the card makes the process look for tasks to take over
                return "TASK_STATE_COMPLETED" in states(webhook)

            await eventually(pushed, within=8, what="the ended task's end to be pushed")
        assert answers(webhook) == ["Tuesday it is."]
    finally:
        webhook.stop()


async def test_a_reset_run_keeps_its_webhooks_until_its_real_end(
    harness: Harness, tmp_path: Path
) -> None:
    # An operator resets the Run: its execution closes TERMINATED and its records stream
    # ends, while the workflow runs on in a new execution. That is not the task's end: the
    # webhook is kept, told nothing false, and the task followed to the new execution's end.
    publish_asking(
        harness,
        "reset_notifier",
        # The reset Run asks again (and waits): its records went on past the reset.
        Reply.tool_calls(ToolCall("ask_question", {"question": "Which day?"}, id="q2")),
        Reply.text("Tuesday it is."),
    )
    webhook = CountingServer().start()

    try:
        async with harness.worker(), serving(harness, tmp_path / "tokens") as (base, _):
            task_id = await send_with_webhook(base, "reset_notifier", webhook.url)
            run = f"psych-{harness.scope.tenant}-{task_id}"

            async def asked() -> bool:
                return "TASK_STATE_INPUT_REQUIRED" in states(webhook)

            await eventually(asked, what="input-required pushed")
            await reset_to_first_task(harness.client.temporal, run)

            async def listed() -> list[str]:
                async with a2a_client(base, "reset_notifier", ACME, streaming=False) as two:
                    found = await two.list_task_push_notification_configs(
                        ListTaskPushNotificationConfigsRequest(task_id=task_id)
                    )
                return [c.url for c in found.configs]

            async def asked_again() -> bool:
                if len(harness.fake.requests) < 2:
                    return False
                return is_waiting(await harness.client.status(run, scope=harness.scope))

            await eventually(asked_again, within=30, what="the reset Run to ask again")
            assert await listed() == [f"{webhook.url}/hook"]
            await harness.client.answer(run, "q2", "Tuesday", scope=harness.scope)

            async def completed() -> bool:
                await listed()  # a request: the process looks for tasks to take over
                return "TASK_STATE_COMPLETED" in states(webhook)

            await eventually(completed, within=60, what="the reset Run's end pushed")

            async def forgotten() -> bool:
                return not await listed()

            await eventually(forgotten, within=30, what="the webhook forgotten after the end")
        # The reset was not reported as the task's end.
        assert "TASK_STATE_FAILED" not in states(webhook)
    finally:
        webhook.stop()


async def test_with_encryption_webhooks_are_kept_sealed_and_pushed(
    harness: Harness, tmp_path: Path
) -> None:
    # The fleet encrypts payloads: psych serve acts for its callers outside any Run, and
    # still keeps their webhooks (sealed for their tenant) and pushes to them.
    temporal = await client_with(harness.env, WORKER_KEYS)
    client = psych_client(harness, temporal)
    publish_asking(harness, "sealed_notifier")
    tokens = tmp_path / "tokens"
    webhook = CountingServer().start()

    try:
        async with (
            run_worker(temporal, harness.settings),
            serving(harness, tokens, client) as (base, _),
        ):
            task_id = await send_with_webhook(base, "sealed_notifier", webhook.url)
            run = f"psych-{harness.scope.tenant}-{task_id}"

            async def asked() -> bool:
                return "TASK_STATE_INPUT_REQUIRED" in states(webhook)

            await eventually(asked, what="input-required pushed")
            on_disk = b"".join(p.read_bytes() for p in sorted(tokens.rglob("*")) if p.is_file())
            assert b"t0ken" not in on_disk and webhook.url.encode() not in on_disk
            await client.answer(run, "q1", "Tuesday", scope=harness.scope)

            async def completed() -> bool:
                return "TASK_STATE_COMPLETED" in states(webhook)

            await eventually(completed, within=60, what="the end pushed")
        assert all(s.headers.get("x-a2a-notification-token") == "t0ken" for s in webhook.seen)
    finally:
        webhook.stop()
