"""Where ``psych serve`` keeps push notification configurations: a ``TokenStore``.

Why there, and not in the Run (an update of its state) or a search attribute: a
configuration carries the caller's webhook credentials (``token``, ``authentication``),
and no secret may enter a workflow payload or a visibility record; the TokenStore is the
fleet's store of exactly such records (a directory the processes share, or the fleet's
bucket, sealed with the payload keys when the client encrypts), mutable per key, and
reachable by every ``psych serve`` process of the fleet. So a configuration registered at
one process is listed, read and deleted at any other, and survives a restart.

Records: one per task, ``TokenKey(tenant, principal=None, issuer=PUSH_ISSUER,
client_id=<workflow id>, resource="configs")``, the task's configurations by id as JSON
(sealed for the task's tenant when the fleet encrypts: ``psych serve`` acts for the
callers it authenticated, outside any Run, so through ``TenantSealedTokens``);
and one index of the tasks being watched (``resource="watched"``): for each, who delivers
(a process id) and when it last said so. A process delivers a task's notifications while
its beat is fresh; a task whose beat went stale (its process stopped) is taken over by the
next process that looks (``PushRegistry.look``).

A record is read, changed and written whole. In one process those three steps are one
(a lock per record), so concurrent requests and beats never lose each other's change. The
port has no compare-and-swap, so two *processes* changing one record at the same moment
may still lose one change: at worst a task is watched twice for a while (a webhook may see
a notification twice, which push receivers must bear anyway), a webhook registered at the
same moment at another process is lost, or a task is not resumed after a restart.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

from a2a.types import TaskPushNotificationConfig
from google.protobuf.json_format import MessageToDict, ParseDict

from psych_runtime.activities.tokens import TokenKey, TokenStore, unsealed

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
        self._index = unsealed(tokens)
        """Where the index is kept: beneath any sealing (it names tasks, principals and
        processes, no secret, and is no one tenant's)."""
        self._locks: weakref.WeakValueDictionary[TokenKey, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )
        """One lock per record being changed in this process (gone once nobody holds it)."""

    def _lock(self, key: TokenKey) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock

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

    async def change(
        self,
        tenant: str,
        workflow_id: str,
        change: Callable[[dict[str, TaskPushNotificationConfig]], bool],
    ) -> None:
        """Read the task's configurations, let ``change`` alter them in place, and write
        them back if it returns True (none left: the record is deleted), as one step in
        this process.

        Raises:
            Exception: what ``change`` raises (nothing is written).
        """
        key = self._key(tenant, workflow_id)
        async with self._lock(key):
            configs = await self.configs(tenant, workflow_id)
            if not change(configs):
                return
            if not configs:
                await self.tokens.delete(key)
                return
            body = {config_id: MessageToDict(config) for config_id, config in configs.items()}
            await self.tokens.put(key, json.dumps(body, sort_keys=True).encode())

    async def watched(self) -> list[Watched]:
        """Every task in the index."""
        record = await self._index.get(_INDEX)
        return [] if record is None else [Watched(**item) for item in json.loads(record)]

    async def watch(self, entries: Iterable[Watched]) -> None:
        """Put ``entries`` in the index (each replacing its task's entry)."""
        new = {(e.tenant, e.workflow_id): e for e in entries}
        if not new:
            return
        async with self._lock(_INDEX):
            kept = [w for w in await self.watched() if (w.tenant, w.workflow_id) not in new]
            await self._write([*kept, *new.values()])

    async def unwatch(self, tenant: str, workflow_id: str, owner: str) -> None:
        """Take the task out of the index, if ``owner`` still delivers it."""
        gone = (tenant, workflow_id, owner)
        async with self._lock(_INDEX):
            entries = await self.watched()
            kept = [w for w in entries if (w.tenant, w.workflow_id, w.owner) != gone]
            if len(kept) != len(entries):
                await self._write(kept)

    async def _write(self, entries: list[Watched]) -> None:
        body = [asdict(entry) for entry in entries]
        await self._index.put(_INDEX, json.dumps(body, sort_keys=True).encode())
