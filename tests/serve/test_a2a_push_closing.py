"""A push watcher that stops short of its task's end (``psych serve`` closing while a
webhook is slow to answer, or a delivery that failed) closes its events before it ends
(``workers/serve/a2a/_push.py``: ``PushRegistry._watch``). Its events are the handler's
``_pushed`` generator, which holds the task's close watch (a long-poll of the execution's
close, ``_closing.py``); left unclosed, the event loop's finalizer closes it later, in a
task of its own, after the registry said it had stopped its watchers.

The events here stand for that generator: one event, then a wait, and a close that takes a
while (a long-poll cancelled and awaited). The webhook is a real loopback server that
answers slowly (``dripping``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from a2a.server.events.event_queue import Event
from a2a.types import Task, TaskPushNotificationConfig

from psych_runtime.activities.egress import Egress, EgressRules, EgressSettings
from psych_runtime.activities.tokens import TokenKey
from psych_runtime.specs import Scope, StoreUnavailable
from psych_runtime.workers.serve.a2a import MemoryTokenStore, PushRegistry, PushStore
from tests._upstream import dripping

SCOPE = Scope(tenant="acme", principal="alice")


class Followed:
    """One task's events: its status, then nothing until closed; ``closed`` is set once
    its close, which takes a while, is done."""

    def __init__(self) -> None:
        self.pushing = asyncio.Event()
        self.closed = asyncio.Event()

    def events(self) -> AsyncIterator[Event]:
        async def follow() -> AsyncIterator[Event]:
            try:
                self.pushing.set()
                yield Task(id="t1", context_id="t1")
                await asyncio.Event().wait()
            finally:
                await asyncio.sleep(0.2)  # the close watch's long-poll, cancelled and awaited
                self.closed.set()

        return follow()


class FailingReads(MemoryTokenStore):
    """A token store in memory whose reads fail once ``failing`` is set."""

    failing = False

    async def get(self, key: TokenKey) -> bytes | None:
        if self.failing:
            raise StoreUnavailable("the token store did not answer")
        return await super().get(key)


def loopback() -> Egress:
    return Egress(EgressSettings(rules=EgressRules.parse("127.0.0.1/32")))


async def test_a_watcher_stopped_mid_push_has_closed_its_events_when_aclose_returns() -> None:
    # Before: aclose cancelled the watcher while it waited on the webhook, and its events
    # (with the close watch under them) were left at their yield for the loop's finalizer.
    followed = Followed()
    pushes = PushRegistry(
        store=PushStore(MemoryTokenStore()), egress=loopback(), timeout_seconds=30
    )
    async with dripping(head=True) as url:  # the answer takes 10 s
        try:
            hook = TaskPushNotificationConfig(url=f"{url}/hook")
            await pushes.register(SCOPE, "run-1", hook, events=followed.events)
            async with asyncio.timeout(10):
                await followed.pushing.wait()
            await asyncio.sleep(0.1)  # the watcher is posting the event
        finally:
            await pushes.aclose()
        assert followed.closed.is_set()


async def test_a_watcher_whose_delivery_failed_has_closed_its_events_when_it_ends() -> None:
    # Before: the failure was logged and the watcher ended, its events left unclosed.
    followed = Followed()
    tokens = FailingReads()
    pushes = PushRegistry(store=PushStore(tokens), egress=loopback(), timeout_seconds=30)
    try:
        hook = TaskPushNotificationConfig(url="http://127.0.0.1:9/hook")
        await pushes.register(SCOPE, "run-1", hook, events=followed.events)
        tokens.failing = True  # before the watcher runs: its delivery reads the configs
        (watcher,) = pushes._watchers.values()
        async with asyncio.timeout(10):
            await watcher
        assert followed.closed.is_set()
    finally:
        await pushes.aclose()
