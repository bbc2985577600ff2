"""Where ``psych serve`` keeps push notification configurations: a ``TokenStore``.

Why there, and not in the Run (an update of its state) or a search attribute: a
configuration carries the caller's webhook credentials (``token``, ``authentication``),
and no secret may enter a workflow payload or a visibility record; the TokenStore is the
fleet's store of exactly such records (a directory the processes share, or the fleet's
bucket, sealed with the payload keys when the client encrypts), mutable per key, and
reachable by every ``psych serve`` process of the fleet. So a configuration registered at
one process is listed, read and deleted at any other, and survives a restart.

Records: one per task, ``TokenKey(tenant, principal=None, issuer=PUSH_ISSUER,
client_id=<workflow id>, resource="configs")``, the task's configurations by id as JSON;
and one index of the tasks being watched (``resource="watched"``): for each, who delivers
(a process id) and when it last said so. A process delivers a task's notifications while
its beat is fresh; a task whose beat went stale (its process stopped) is taken over by the
next process that looks (``PushRegistry.resume``). The index is read, changed and written
whole (the port has no compare-and-swap), so two processes changing it at the same moment
may lose one change: at worst a task is watched twice for a while (a webhook may see a
notification twice, which push receivers must bear anyway) or not resumed after a restart.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from a2a.types import TaskPushNotificationConfig
from google.protobuf.json_format import MessageToDict, ParseDict

from psych_runtime.activities.tokens import TokenKey, TokenStore

PUSH_ISSUER = "psych:a2a-push"
"""The ``issuer`` of every push record: apart from every OAuth token's key."""

_INDEX = TokenKey(tenant="-", principal=None, issuer=PUSH_ISSUER, client_id="-", resource="watched")


@dataclass(frozen=True)
class Watched:
    """A task whose notifications a process delivers.

    Attributes:
        tenant: the task's tenant.
        principal: who registered its first webhook (the Scope a resumed watcher reads as).
        workflow_id: the Run.
        owner: the delivering process's id.
        beat: when the owner last said it delivers (seconds since the epoch).
    """

    tenant: str
    principal: str | None
    workflow_id: str
    owner: str
    beat: float


class MemoryTokenStore:
    """A TokenStore in this process only (``psych serve`` without a shared store: its push
    configurations are forgotten on restart)."""

    def __init__(self) -> None:
        self._records: dict[TokenKey, bytes] = {}

    async def get(self, key: TokenKey) -> bytes | None:
        """The record under ``key``, or None."""
        return self._records.get(key)

    async def put(self, key: TokenKey, record: bytes) -> None:
        """Store ``record`` under ``key``."""
        self._records[key] = record

    async def delete(self, key: TokenKey) -> None:
        """Forget the record under ``key``."""
        self._records.pop(key, None)


class PushStore:
    """Push configurations and the watched-task index, in a TokenStore."""

    def __init__(self, tokens: TokenStore) -> None:
        self.tokens = tokens

    @staticmethod
    def _key(tenant: str, workflow_id: str) -> TokenKey:
        return TokenKey(
            tenant=tenant,
            principal=None,
            issuer=PUSH_ISSUER,
            client_id=workflow_id,
            resource="configs",
        )

    async def configs(self, tenant: str, workflow_id: str) -> dict[str, TaskPushNotificationConfig]:
        """The task's configurations by id (none: empty)."""
        record = await self.tokens.get(self._key(tenant, workflow_id))
        if record is None:
            return {}
        found: dict[str, TaskPushNotificationConfig] = {}
        for config_id, data in json.loads(record).items():
            found[config_id] = ParseDict(data, TaskPushNotificationConfig())
        return found

    async def save(
        self, tenant: str, workflow_id: str, configs: dict[str, TaskPushNotificationConfig]
    ) -> None:
        """Replace the task's configurations (none: its record is deleted)."""
        key = self._key(tenant, workflow_id)
        if not configs:
            await self.tokens.delete(key)
            return
        body = {config_id: MessageToDict(config) for config_id, config in configs.items()}
        await self.tokens.put(key, json.dumps(body, sort_keys=True).encode())

    async def watched(self) -> list[Watched]:
        """Every task in the index."""
        record = await self.tokens.get(_INDEX)
        return [] if record is None else [Watched(**item) for item in json.loads(record)]

    async def watch(self, entry: Watched) -> None:
        """Put ``entry`` in the index (replacing the task's entry)."""
        kept = [
            w
            for w in await self.watched()
            if (w.tenant, w.workflow_id) != (entry.tenant, entry.workflow_id)
        ]
        await self._write([*kept, entry])

    async def unwatch(self, tenant: str, workflow_id: str, owner: str) -> None:
        """Take the task out of the index, if ``owner`` still delivers it."""
        entries = await self.watched()
        kept = [
            w for w in entries if (w.tenant, w.workflow_id, w.owner) != (tenant, workflow_id, owner)
        ]
        if len(kept) != len(entries):
            await self._write(kept)

    async def _write(self, entries: list[Watched]) -> None:
        body = [asdict(entry) for entry in entries]
        await self.tokens.put(_INDEX, json.dumps(body, sort_keys=True).encode())
