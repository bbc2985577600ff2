"""Push notifications: the webhooks a caller registers for its tasks, and their delivery.

Configurations are kept per (tenant, task) in this server process: a caller lists, reads
and deletes only its own tenant's. Each task with a webhook has one watcher (an asyncio
task on the server's loop) that follows the Run and POSTs every task status update and
the final answer artifact (not the streamed text: one request per token would flood a
webhook) to each webhook as a ``StreamResponse`` JSON body, with the configured token in
``X-A2A-Notification-Token`` and the configured credentials as ``Authorization``.
Delivery is best-effort and bounded: one attempt per event, ``timeout_seconds`` each,
failures logged. Every request goes through the egress port (``activities/egress``): a
webhook URL is a caller's choice, judged like a Spec's URL for the caller's tenant (the
environment's ``PSYCH_EGRESS_*`` and the global settings file), at registration by what
needs no lookup and at delivery by the address connected to. The configurations live in
memory: a restarted server forgets them (the Runs themselves are durable; a caller
re-registers, or subscribes).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
from a2a.server.events.event_queue import Event
from a2a.types import TaskPushNotificationConfig
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError
from a2a.utils.proto_utils import to_stream_response
from google.protobuf.json_format import MessageToDict

from psych_runtime.activities.egress import Egress, EgressDenied, EgressSettings
from psych_runtime.specs import Scope
from psych_runtime.workers._settings import worker_egress
from psych_runtime.workflows import PsychClient

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


def _egress() -> Egress:
    return Egress(worker_egress(EgressSettings.from_env()))


@dataclass
class PushRegistry:
    """The webhooks of every task of this server, and their watchers."""

    client: PsychClient
    timeout_seconds: float = 10.0
    egress: Egress = field(default_factory=_egress)
    _configs: dict[_Key, dict[str, TaskPushNotificationConfig]] = field(
        default_factory=dict, init=False
    )
    _watchers: dict[_Key, asyncio.Task[None]] = field(default_factory=dict, init=False)

    def register(
        self,
        scope: Scope,
        workflow_id: str,
        config: TaskPushNotificationConfig,
        *,
        events: Callable[[], AsyncIterator[Event]],
    ) -> TaskPushNotificationConfig:
        """Keep ``config`` for the task and start its watcher if none runs.

        ``events`` makes the watcher's event iterator (the task's events from now on).

        Raises:
            InvalidParamsError: a URL that is not http(s), or too many webhooks.
        """
        self.check(scope, config.url)
        key = (scope.tenant, workflow_id)
        kept = TaskPushNotificationConfig()
        kept.CopyFrom(config)
        kept.tenant = ""  # the caller's tenant is its Scope's, never what it sent
        if not kept.id:
            kept.id = uuid.uuid4().hex
        configs = self._configs.setdefault(key, {})
        if kept.id not in configs and len(configs) >= MAX_CONFIGS_PER_TASK:
            raise InvalidParamsError(f"a task has at most {MAX_CONFIGS_PER_TASK} webhooks")
        configs[kept.id] = kept
        watcher = self._watchers.get(key)
        if watcher is None or watcher.done():
            self._watchers[key] = asyncio.create_task(self._watch(key, events()))
        return kept

    def check(self, scope: Scope, url: str) -> None:
        """Refuse a webhook ``url`` that is not http(s) or that the egress policy refuses
        for the caller's tenant (by what needs no lookup).

        Raises:
            InvalidParamsError: naming what is wrong.
        """
        checked_url(url)
        refusal = self.egress.judge(url, scope.tenant)
        if refusal is not None:
            raise InvalidParamsError(f"push notification url: {refusal.message(url)}")

    def get(self, scope: Scope, workflow_id: str, config_id: str) -> TaskPushNotificationConfig:
        """One of the task's webhooks.

        Raises:
            TaskNotFoundError: the task has no webhook with this id.
        """
        found = self._configs.get((scope.tenant, workflow_id), {}).get(config_id)
        if found is None:
            raise TaskNotFoundError(f"the task has no push notification config {config_id!r}")
        return found

    def list(self, scope: Scope, workflow_id: str) -> list[TaskPushNotificationConfig]:
        """The task's webhooks."""
        return list(self._configs.get((scope.tenant, workflow_id), {}).values())

    def delete(self, scope: Scope, workflow_id: str, config_id: str) -> None:
        """Forget one of the task's webhooks (absent: nothing to do)."""
        self._configs.get((scope.tenant, workflow_id), {}).pop(config_id, None)

    async def _watch(self, key: _Key, events: AsyncIterator[Event]) -> None:
        http = self.egress.http(key[0])  # the tenant's client of the port, shared
        try:
            async for event in events:
                await self._deliver(http, key, event)
        except Exception:
            logger.exception("push notifications of %s stopped", key[1])
        finally:
            self._watchers.pop(key, None)

    async def _deliver(self, http: httpx.AsyncClient, key: _Key, event: Event) -> None:
        body = MessageToDict(to_stream_response(event))
        configs = list(self._configs.get(key, {}).values())
        await asyncio.gather(*(self._post(http, config, body) for config in configs))

    async def _post(
        self, http: httpx.AsyncClient, config: TaskPushNotificationConfig, body: dict[str, Any]
    ) -> None:
        headers: dict[str, str] = {}
        if config.token:
            headers["X-A2A-Notification-Token"] = config.token
        if config.HasField("authentication") and config.authentication.credentials:
            auth = config.authentication
            headers["Authorization"] = f"{auth.scheme or 'Bearer'} {auth.credentials}"
        try:
            response = await http.post(
                config.url, json=body, headers=headers, timeout=self.timeout_seconds
            )
            response.raise_for_status()
        except (httpx.HTTPError, EgressDenied) as err:
            logger.warning("push notification to %s failed: %s", config.url, err)
