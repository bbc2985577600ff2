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

A record is read, changed and written whole, as one step of the store
(``TokenStore.update``: a lock file per shard in a directory, a conditional write in a
bucket), so two processes changing one record at once never lose either change; within a
process a lock per record queues its own changes before they reach the store. What stays
possible: two processes that each find a task unwatched at the same moment both start a
watcher of it (a webhook may see a notification twice for a while, which push receivers
must bear anyway).
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

from a2a.types import TaskPushNotificationConfig
from google.protobuf.json_format import MessageToDict, ParseDict

from psych_runtime.activities.tokens import Change, TokenKey, TokenStore, unsealed

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
        self._updating = asyncio.Lock()

    async def get(self, key: TokenKey) -> bytes | None:
        """The record under ``key``, or None."""
        return self._records.get(key)

    async def put(self, key: TokenKey, record: bytes) -> None:
        """Store ``record`` under ``key``."""
        self._records[key] = record

    async def delete(self, key: TokenKey) -> None:
        """Forget the record under ``key``."""
        self._records.pop(key, None)

    async def update(self, key: TokenKey, change: Change) -> None:
        """Replace the record under ``key`` by ``change(record)``, one update at a time
        (through ``get``/``put``/``delete``, which a subclass may make yield)."""
        async with self._updating:
            current = await self.get(key)
            new = change(current)
            if new == current:
                return
            if new is None:
                await self.delete(key)
            else:
                await self.put(key, new)


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
        return _configs(await self.tokens.get(self._key(tenant, workflow_id)))

    async def change(
        self,
        tenant: str,
        workflow_id: str,
        change: Callable[[dict[str, TaskPushNotificationConfig]], bool],
    ) -> None:
        """Read the task's configurations, let ``change`` alter them in place, and write
        them back if it returns True (none left: the record is deleted), as one step
        against every other change of them, in any process sharing the store
        (``TokenStore.update``). ``change`` may be called again on a newer record when
        another process changed it first.

        Raises:
            Exception: what ``change`` raises (nothing is written).
        """

        def rewrite(record: bytes | None) -> bytes | None:
            configs = _configs(record)
            if not change(configs):
                return record
            if not configs:
                return None
            body = {config_id: MessageToDict(config) for config_id, config in configs.items()}
            return json.dumps(body, sort_keys=True).encode()

        key = self._key(tenant, workflow_id)
        async with self._lock(key):  # this process's changes queue here, not at the store
            await self.tokens.update(key, rewrite)

    async def watched(self) -> list[Watched]:
        """Every task in the index."""
        return _watched(await self._index.get(_INDEX))

    async def watch(self, entries: Iterable[Watched]) -> None:
        """Put ``entries`` in the index (each replacing its task's entry)."""
        new = {(e.tenant, e.workflow_id): e for e in entries}
        if not new:
            return

        def rewrite(record: bytes | None) -> bytes | None:
            kept = [w for w in _watched(record) if (w.tenant, w.workflow_id) not in new]
            return _index([*kept, *new.values()])

        async with self._lock(_INDEX):
            await self._index.update(_INDEX, rewrite)

    async def unwatch(self, tenant: str, workflow_id: str, owner: str) -> None:
        """Take the task out of the index, if ``owner`` still delivers it."""
        gone = (tenant, workflow_id, owner)

        def rewrite(record: bytes | None) -> bytes | None:
            entries = _watched(record)
            kept = [w for w in entries if (w.tenant, w.workflow_id, w.owner) != gone]
            return record if len(kept) == len(entries) else _index(kept)

        async with self._lock(_INDEX):
            await self._index.update(_INDEX, rewrite)


def _configs(record: bytes | None) -> dict[str, TaskPushNotificationConfig]:
    """A task's configurations by id, from its record."""
    if record is None:
        return {}
    return {
        config_id: ParseDict(data, TaskPushNotificationConfig())
        for config_id, data in json.loads(record).items()
    }


def _watched(record: bytes | None) -> list[Watched]:
    """The index's entries, from its record."""
    return [] if record is None else [Watched(**item) for item in json.loads(record)]


def _index(entries: list[Watched]) -> bytes:
    """The index's record of ``entries``."""
    return json.dumps([asdict(entry) for entry in entries], sort_keys=True).encode()
