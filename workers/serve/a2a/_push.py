"""Push notifications: the webhooks a caller registers for its tasks, and their delivery.

Configurations are kept per (tenant, task) in a ``PushStore`` (``_push_store.py``: the
fleet's TokenStore, so every ``psych serve`` process sees them and they survive a
restart; in memory when the server is given none): a caller lists, reads and deletes only
its own tenant's. Each task with a webhook has one watcher (an asyncio task on the loop of
one server process, the one whose beat in the store is fresh) that follows the Run,
reading the task's configurations from the store at each event, and POSTs every task
status update and
the final answer artifact (not the streamed text: one request per token would flood a
webhook) to each webhook as a ``StreamResponse`` JSON body, with the configured token in
``X-A2A-Notification-Token`` and the configured credentials as ``Authorization`` (the
caller's own credential is never sent). Delivery is best-effort and bounded: one attempt
per event, ``timeout_seconds`` each, redirects not followed (a 3xx is a failure: a
redirect would carry the webhook's token to the host it names), the answer's status read
and its body never, failures logged. Every request goes through the egress port
(``activities/egress``): a webhook URL is a caller's choice, judged like a Spec's URL for
the caller's tenant (the environment's ``PSYCH_EGRESS_*`` and the global settings file,
or the app's ``ServeSettings.egress``), at registration by its name and the addresses it
resolves to then, and at delivery by the address connected to. A process that stopped
leaves its tasks' beats to go stale; the next request any process serves looks for such
tasks (at most every ``lease_seconds``) and takes them over: the watcher then first pushes
the task's status as it is now, so a webhook learns of what happened meanwhile (a task
that ended is pushed its answer and its end once), and follows from there. Once a
task's end is pushed, its configurations are deleted: they hold the caller's webhook
credentials, nothing more will be sent, and an ended task takes no new one (so its list
is empty and a get is "not found"); one registered while the end was being pushed gets
it first. A task whose Run is gone (past the namespace's retention) counts as ended.

A registration names its process in the index before it stores the webhook, unless a
watcher already runs (here, or at a process whose beat is fresh); then it asks the index
again once the webhook is stored, and starts a watcher itself if that process has left
meanwhile. A watcher that leaves the index reads the task's webhooks once more after it
left. So a webhook stored as the task ends is delivered by one side or the other.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
from a2a.server.events.event_queue import Event
from a2a.types import TaskPushNotificationConfig
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError
from a2a.utils.proto_utils import to_stream_response
from google.protobuf.json_format import MessageToDict

from psych_runtime.activities.egress import PURPOSE, Egress, EgressDenied, EgressSettings, Purpose
from psych_runtime.specs import Scope
from psych_runtime.workers._settings import worker_egress
from psych_runtime.workers.serve.a2a._push_store import MemoryTokenStore, PushStore, Watched

logger = logging.getLogger(__name__)

_Key = tuple[str, str]
"""(tenant, workflow id)."""

MAX_CONFIGS_PER_TASK = 10
"""The most webhooks one task may have (each event is one request to each)."""


def checked_url(url: str) -> str:
    """``url`` when it is an absolute http(s) URL with a host.

    Raises:
        InvalidParamsError: another scheme, or no host.
    """
    try:
        parts = urlsplit(url)
    except ValueError as err:
        raise InvalidParamsError(f"push notification url {url!r} is malformed") from err
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidParamsError(
            f"push notification url {url!r}: only http and https URLs with a host are accepted"
        )
    return url


def _without(ids: set[str], configs: dict[str, TaskPushNotificationConfig]) -> bool:
    """Forget the configurations ``ids`` (a ``PushStore.change``)."""
    for config_id in ids:
        configs.pop(config_id, None)
    return True


def _purpose(tenant: str) -> Purpose:
    """What a webhook's requests are for, as the egress port's refusals name them."""
    return Purpose("a2a_push", f"an A2A push notification webhook of tenant {tenant!r}")


def _egress() -> Egress:
    return Egress(worker_egress(EgressSettings.from_env()))


def _entries(owner: str, principals: dict[_Key, str | None], *, beat: float) -> list[Watched]:
    """The index entries saying that ``owner`` delivers these tasks, as of ``beat``."""
    return [
        Watched(tenant, principal, workflow_id, owner, beat)
        for (tenant, workflow_id), principal in principals.items()
    ]


Resumed = Callable[[Scope, str], AsyncIterator[Event]]
"""A taken-over task's events: its status as it is now, then what follows."""

_Start = tuple[_Key, str | None, Callable[[], AsyncIterator[Event]]]
"""A watcher to start: the task, whom it reads as, and what makes its events."""


@dataclass
class PushRegistry:
    """The webhooks of every task, and this process's watchers of them."""

    timeout_seconds: float = 10.0
    egress: Egress = field(default_factory=_egress)
    store: PushStore = field(default_factory=lambda: PushStore(MemoryTokenStore()))
    lease_seconds: float = 30.0
    """A watcher says it delivers every third of this; a task whose process said nothing
    for this long is taken over."""
    owner: str = field(default_factory=lambda: uuid.uuid4().hex)
    """This process, in the store's index."""
    resumed: Resumed | None = None
    """How a taken-over task is followed (set by the request handler)."""
    _watchers: dict[_Key, asyncio.Task[None]] = field(default_factory=dict, init=False)
    _principals: dict[_Key, str | None] = field(default_factory=dict, init=False)
    """Whom each of this process's watchers reads as (what its beat writes)."""
    _starting: asyncio.Lock = field(default_factory=asyncio.Lock, init=False)
    _claimed: set[_Key] = field(default_factory=set, init=False)
    """Tasks named in the index for this process whose watcher starts once the registration
    that named them has stored its webhook."""
    """Held from asking whether a task has a watcher to starting one: one watcher a task."""
    _beating: asyncio.Task[None] | None = field(default=None, init=False)
    _closed: bool = field(default=False, init=False)
    """Set by ``aclose`` (with ``_starting`` held): no watcher starts after it."""
    _looked: float = field(default=float("-inf"), init=False)
    _looking: asyncio.Task[None] | None = field(default=None, init=False)

    async def register(
        self,
        scope: Scope,
        workflow_id: str,
        config: TaskPushNotificationConfig,
        *,
        events: Callable[[], AsyncIterator[Event]],
    ) -> TaskPushNotificationConfig:
        """Keep ``config`` for the task and start its watcher unless one runs (here, or at
        another process whose beat is fresh: it reads the new configuration from the store).

        ``events`` makes the watcher's event iterator (the task's events from now on).

        Raises:
            InvalidParamsError: a URL that is not http(s), or too many webhooks.
        """
        await self.check(scope, config.url)
        key = (scope.tenant, workflow_id)
        kept = TaskPushNotificationConfig()
        kept.CopyFrom(config)
        kept.tenant = ""  # the caller's tenant is its Scope's, never what it sent
        if not kept.id:
            kept.id = uuid.uuid4().hex

        def add(configs: dict[str, TaskPushNotificationConfig]) -> bool:
            if kept.id not in configs and len(configs) >= MAX_CONFIGS_PER_TASK:
                raise InvalidParamsError(f"a task has at most {MAX_CONFIGS_PER_TASK} webhooks")
            configs[kept.id] = kept
            return True

        start: _Start = (key, scope.principal, events)
        claimed = await self._claim(start)
        try:
            await self.store.change(*key, add)
        finally:  # the index names this process now: it delivers what the task has
            if claimed:
                async with self._starting:
                    self._claimed.discard(key)
                    self._spawn([start])
        if not claimed:
            # The process named may have forgotten the task (it ended) before this webhook
            # was stored; if it did, the webhook is this process's to deliver. (If it had
            # not, it reads the task's configurations once more after leaving the index.)
            async with self._starting:
                if not await self._delivered(key):
                    await self._start([start])
        return kept

    async def _claim(self, start: _Start) -> bool:
        """Name this process in the index as the task's deliverer, unless a watcher of it
        runs (here, or at a process whose beat is fresh); whether it did. The index first:
        a configuration is never kept for a task no process is named to deliver (a crash
        between the two writes leaves, at worst, a task watched with no webhook until it
        ends). The lock is held for the index only, not the configuration's write."""
        key = start[0]
        async with self._starting:
            if await self._delivered(key):
                return False
            await self._mark([start])
            self._claimed.add(key)
            return True

    async def _delivered(self, key: _Key) -> bool:
        """Whether a watcher of the task runs, here or at a process whose beat is fresh."""
        if self._watching(key):
            return True
        for entry in await self.store.watched():
            if (entry.tenant, entry.workflow_id) == key and self._fresh(entry):
                return True
        return False

    def _watching(self, key: _Key) -> bool:
        """Whether this process watches the task, or starts a watcher of it."""
        watcher = self._watchers.get(key)
        return key in self._claimed or (watcher is not None and not watcher.done())

    def _fresh(self, entry: Watched) -> bool:
        return entry.owner != self.owner and time.time() - entry.beat < self.lease_seconds

    async def _start(self, starts: list[_Start]) -> None:
        """Start these tasks' watchers, with one write of the index for all of them (with
        ``_starting`` held)."""
        await self._mark(starts)
        self._spawn(starts)

    async def _mark(self, starts: list[_Start]) -> None:
        """Name this process in the index as the deliverer of these tasks, in one write
        (once closed, with a stale beat: another process takes them over at its next look)."""
        if starts:
            principals = {key: principal for key, principal, _ in starts}
            beat = 0.0 if self._closed else time.time()
            await self.store.watch(_entries(self.owner, principals, beat=beat))

    def _spawn(self, starts: list[_Start]) -> None:
        """Start the watchers of these marked tasks (none once closed)."""
        if self._closed:
            return
        for key, principal, events in starts:
            self._principals[key] = principal
            self._watchers[key] = asyncio.create_task(self._watch(key, events()))
        if self._beating is None or self._beating.done():
            self._beating = asyncio.create_task(self._beat())

    def look(self) -> None:
        """Take over tasks whose process stopped delivering (at most every
        ``lease_seconds``; in the background: a request never waits for it)."""
        now = time.monotonic()
        if self.resumed is None or now - self._looked < self.lease_seconds:
            return
        if self._looking is not None and not self._looking.done():
            return
        self._looked = now
        self._looking = asyncio.create_task(self._take_over(self.resumed))

    async def _take_over(self, resumed: Resumed) -> None:
        try:
            async with self._starting:
                if self._closed:
                    return
                starts: list[_Start] = []
                for entry in await self.store.watched():
                    key = (entry.tenant, entry.workflow_id)
                    if self._fresh(entry) or self._watching(key):
                        continue
                    scope = Scope(tenant=entry.tenant, principal=entry.principal)
                    follow = functools.partial(resumed, scope, entry.workflow_id)
                    starts.append((key, entry.principal, follow))
                await self._start(starts)
        except Exception:
            logger.exception("taking over push notifications failed")

    async def check(self, scope: Scope, url: str) -> None:
        """Refuse a webhook ``url`` that is not http(s) or that the egress policy refuses
        for the caller's tenant: by its host's name and an address literal, then by the
        addresses its name resolves to (a lookup that fails or takes longer than
        ``timeout_seconds`` refuses nothing here: delivery judges the address it connects
        to, whatever the name resolves to then). A refusal is logged and counted as the
        port's refusals of a connection are (``Egress.report``), its purpose ``a2a_push``.

        Raises:
            InvalidParamsError: naming what is wrong.
        """
        checked_url(url)
        refusal = self.egress.judge(url, scope.tenant)
        if refusal is None:
            try:
                async with asyncio.timeout(self.timeout_seconds):
                    refusal = await self.egress.judge_resolved(url, scope.tenant)
            except TimeoutError:
                refusal = None
        if refusal is not None:
            self.egress.report(EgressDenied(refusal, url, _purpose(scope.tenant)))
            raise InvalidParamsError(f"push notification url: {refusal.message(url)}")

    async def get(
        self, scope: Scope, workflow_id: str, config_id: str
    ) -> TaskPushNotificationConfig:
        """One of the task's webhooks.

        Raises:
            TaskNotFoundError: the task has no webhook with this id.
        """
        found = (await self.store.configs(scope.tenant, workflow_id)).get(config_id)
        if found is None:
            raise TaskNotFoundError(f"the task has no push notification config {config_id!r}")
        return found

    async def list(self, scope: Scope, workflow_id: str) -> list[TaskPushNotificationConfig]:
        """The task's webhooks."""
        return list((await self.store.configs(scope.tenant, workflow_id)).values())

    async def delete(self, scope: Scope, workflow_id: str, config_id: str) -> None:
        """Forget one of the task's webhooks (absent: nothing to do)."""
        await self.store.change(
            scope.tenant,
            workflow_id,
            lambda configs: configs.pop(config_id, None) is not None,
        )

    async def _watch(self, key: _Key, events: AsyncIterator[Event]) -> None:
        http = self.egress.http(key[0])  # the tenant's client of the port, shared
        ended = False
        last: collections.deque[tuple[Event, set[str]]] = collections.deque(maxlen=2)
        """The last two events (a task ends with its answer, then its status), and the
        configurations each was pushed to."""
        try:
            async for event in events:
                last.append((event, await self._deliver(http, key, event)))
            ended = True
        except Exception:
            logger.exception("push notifications of %s stopped", key[1])
        finally:
            if self._watchers.get(key) is asyncio.current_task():
                del self._watchers[key]
                del self._principals[key]
            if isinstance(events, AsyncGenerator):
                # Stopped short of the end (a delivery failed, or ``aclose`` cancelled this
                # mid-push): its close watch ends now, not when the loop's finalizer gets
                # to it after this registry said its watchers had stopped.
                try:
                    await events.aclose()
                except Exception:
                    logger.exception("push notifications of %s: closing its events failed", key[1])
        if ended:  # the task ended: nothing more to push, and none may be registered
            try:
                await self._forget(http, key, last)
                async with self._starting:
                    if self._watching(key):
                        return  # named again by a registration here: its watcher's now
                    await self.store.unwatch(key[0], key[1], self.owner)
                # A registration at another process that saw this one named left its
                # webhook to it, and may have stored it after the read above: read again.
                await self._forget(http, key, last)
            except Exception:  # the task stays in the index, and is resumed to its end
                logger.exception("push notifications of %s: forgetting the task failed", key[1])

    async def _forget(
        self, http: httpx.AsyncClient, key: _Key, last: Iterable[tuple[Event, set[str]]]
    ) -> None:
        """Delete the ended task's configurations, each once the task's last events reached
        it: one registered while they were being pushed (the task's state was not yet
        terminal when its caller asked) gets them first, and none is deleted unseen."""
        while True:
            configs = await self.store.configs(*key)
            if not configs:
                return
            for event, sent in last:
                late = {config_id: c for config_id, c in configs.items() if config_id not in sent}
                if late:
                    body = MessageToDict(to_stream_response(event))
                    await asyncio.gather(
                        *(self._post(http, key[0], c, body) for c in late.values())
                    )
                    sent.update(late)
            await self.store.change(*key, functools.partial(_without, set(configs)))

    @property
    def closed(self) -> bool:
        """Whether ``aclose`` ran: no watcher starts any more."""
        return self._closed

    async def aclose(self) -> None:
        """Stop this process's watchers, leaving their tasks for another process (or this
        server restarted) to take over. Once closed, nothing more to do."""
        if self._closed:
            return
        looking = self._looking
        if looking is not None:  # a take-over under way stops here
            looking.cancel()
            await asyncio.gather(looking, return_exceptions=True)
        async with self._starting:  # a start under way finishes first; none after
            self._closed = True
        left = dict(self._principals)
        tasks = [*self._watchers.values(), *([self._beating] if self._beating else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # Their beats made stale at once: another process takes them over at its next look.
        try:
            await self.store.watch(_entries(self.owner, left, beat=0.0))
        except Exception:  # then they are taken over once their last beat is a lease old
            logger.exception("push notifications: handing %d tasks over failed", len(left))
        await self.egress.aclose()

    async def _beat(self) -> None:
        """Say in the store, every third of the lease, which tasks this process delivers:
        one write of the index for all of them."""
        while self._watchers:
            await asyncio.sleep(self.lease_seconds / 3)
            try:
                await self.store.watch(_entries(self.owner, self._principals, beat=time.time()))
            except Exception:
                logger.exception("push notifications: the beat failed")

    async def _deliver(self, http: httpx.AsyncClient, key: _Key, event: Event) -> set[str]:
        """Push ``event`` to the task's configurations; return their ids."""
        body = MessageToDict(to_stream_response(event))
        # Read at each event: a webhook registered at another process counts too.
        configs = await self.store.configs(*key)
        await asyncio.gather(
            *(self._post(http, key[0], config, body) for config in configs.values())
        )
        return set(configs)

    async def _post(
        self,
        http: httpx.AsyncClient,
        tenant: str,
        config: TaskPushNotificationConfig,
        body: dict[str, Any],
    ) -> None:
        headers: dict[str, str] = {}
        if config.token:
            headers["X-A2A-Notification-Token"] = config.token
        if config.HasField("authentication") and config.authentication.credentials:
            auth = config.authentication
            headers["Authorization"] = f"{auth.scheme or 'Bearer'} {auth.credentials}"
        try:
            # httpx's timeout bounds each phase (a slow drip of bytes resets it): the whole
            # request is bounded here. A redirect is not followed: httpx would send the
            # webhook's token (and, for 307/308, the update) to whatever host it names,
            # and turn a 301/302 into a GET without the update. Only the status is read,
            # never the body: an answer of the webhook's is nothing to us, and the
            # port's bound (max_response_bytes) would still be megabytes per push.
            async with (
                asyncio.timeout(self.timeout_seconds),
                http.stream(
                    "POST",
                    config.url,
                    json=body,
                    headers=headers,
                    timeout=self.timeout_seconds,
                    follow_redirects=False,
                    extensions={PURPOSE: _purpose(tenant)},
                ) as response,
            ):
                status = response.status_code
            if status >= 300:
                where = response.headers.get("location")
                said = f"{status}, a redirect to {where} (not followed)" if where else status
                logger.warning("push notification to %s failed: answered %s", config.url, said)
        except TimeoutError:
            logger.warning(
                "push notification to %s failed: no answer within %g s",
                config.url,
                self.timeout_seconds,
            )
        except EgressDenied as err:  # the port logged what it was for
            said = err.refusal.message()
            logger.warning("push notification to %s failed: %s", config.url, said)
        except httpx.HTTPError as err:
            logger.warning("push notification to %s failed: %s", config.url, err)
