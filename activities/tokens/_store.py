"""The TokenStore port: OAuth tokens a worker fleet holds, one record per key.

A record is opaque bytes (the MCP OAuth adapter writes JSON of the SDK's token) stored
under a ``TokenKey``: tenant, principal, the authorization server's issuer, the client id
and the protected resource. The key is part of where a record lives, so a token one
authorization server issued is looked up only under that issuer and never handed to a
flow talking to another; a resource-bound token (RFC 8707) likewise stays with its
resource. Records are mutable (a refresh replaces one), unlike content-addressed blobs.

``LocalTokenStore`` keeps them in a directory (the embedded default, or a volume workers
share); ``S3TokenStore`` (``_s3``) in an S3-compatible bucket for fleets;
``EncryptedTokenStore`` seals every record with a ``BlobCipher`` (the payload codec's keys)
before its inner store sees it, for the tenant of the Run whose activity runs;
``TenantSealedTokens`` for the tenant each key names, outside a Run.

``update`` changes a record as one step against every other update of it, by any process
sharing the store (a lock file per directory shard; a conditional write in a bucket):
what a record shared by several writers (the A2A push records of ``psych serve``) needs,
where a get then a put could lose another process's change made in between.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from psych_runtime.activities._durable_files import sweep_temporary, sync_directory
from psych_runtime.activities.blobs import BlobCipher, TenantCipher, disk_answering
from psych_runtime.specs import NotFound

STORE_KIND = "local token store"
"""How a ``LocalStoreFailed`` of a ``LocalTokenStore`` names it (never where it is)."""


@dataclass(frozen=True, order=True)
class TokenKey:
    """Whose token, from which authorization server, for which client and resource.

    Attributes:
        tenant: the Scope's tenant.
        principal: the Scope's principal (None: the tenant's own).
        issuer: the authorization server's issuer identifier (RFC 8414), exactly.
        client_id: the OAuth client the token was issued to.
        resource: the protected resource the token is for (RFC 8707; the MCP server).
    """

    tenant: str
    principal: str | None
    issuer: str
    client_id: str
    resource: str

    def digest(self) -> str:
        """sha256 hex of the key's fields: where a store keeps its record (no field can
        name a path or an object outside the store, however it is spelled)."""
        fields = [self.tenant, self.principal, self.issuer, self.client_id, self.resource]
        return hashlib.sha256(json.dumps(fields).encode()).hexdigest()

    def location(self) -> str:
        """The record's relative key in a store: ``<2 hex>/<62 hex>``."""
        digest = self.digest()
        return f"{digest[:2]}/{digest[2:]}"

    def __repr__(self) -> str:
        who = self.tenant if self.principal is None else f"{self.tenant}/{self.principal}"
        return f"TokenKey({who} issuer={self.issuer} client={self.client_id} {self.resource})"


Change = Callable[[bytes | None], bytes | None]
"""What ``TokenStore.update`` does to a record: given the record now (None: there is
none), the record to leave (None: none; the same bytes: leave it untouched). It may be
called more than once (again on the newer record, when another writer came first), so it
must not act beyond computing its answer; what it raises ends the update, writing nothing.
"""


@runtime_checkable
class TokenStore(Protocol):
    """Port: one mutable record per ``TokenKey``, shared by every worker of a fleet."""

    async def get(self, key: TokenKey) -> bytes | None:
        """The record stored under ``key``, or None when there is none."""
        ...

    async def put(self, key: TokenKey, record: bytes) -> None:
        """Store ``record`` under ``key``, replacing any record there."""
        ...

    async def delete(self, key: TokenKey) -> None:
        """Forget the record under ``key`` (nothing when there is none)."""
        ...

    async def update(self, key: TokenKey, change: Change) -> None:
        """Replace the record under ``key`` by ``change(record)`` as one step: no other
        update of the key, by this process or another sharing the store, lands between
        the read ``change`` saw and the write of its answer, and a ``put`` or ``delete``
        meanwhile is not lost under it: it waits for the write (a lock), or makes the
        write fail and the update read again (a conditional write).

        Raises:
            Exception: what ``change`` raises (nothing is written).
        """
        ...


class LocalTokenStore:
    """Records as files ``<root>/<2 hex>/<62 hex>`` (mode 0600), replaced atomically.

    Workers on one machine, or sharing a volume, may share a root. An ``update`` holds its
    shard's lock file (``<root>/<2 hex>/.lock``, ``flock``, made by the first update of
    the shard) from its read to its write, so updates of a key, in any process, are one
    step each (on a shared volume, where its file locks reach every host: a local disk,
    NFSv4). A ``put`` or ``delete`` holds it too, so neither lands between an update's
    read and its write to be lost under it. Reads take none (a record is replaced by a
    rename).

    A disk error (an ``OSError``: a read-only or unwritable directory, a full disk) raises
    ``LocalStoreFailed``, a ``StoreUnavailable`` naming the record by key, as an S3 token
    store's does, the path only in its ``detail`` and the log: an MCP server's OAuth
    failure carries it to the Run.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def _path(self, key: TokenKey) -> Path:
        return self.root / key.location()

    def _disk(self, key: TokenKey, done: str) -> contextlib.AbstractContextManager[None]:
        """``disk_answering`` for the record of ``key``: "... cannot be <done>"."""
        what = f"the token record {key!r} cannot be {done}"
        return disk_answering(what, repr(key), os.fspath(self.root), kind=STORE_KIND)

    async def get(self, key: TokenKey) -> bytes | None:
        """The record under ``key``, or None."""
        with self._disk(key, "read"):
            return self._read(self._path(key))

    @staticmethod
    def _read(path: Path) -> bytes | None:
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None

    @contextlib.contextmanager
    def _locked(self, key: TokenKey, done: str) -> Iterator[Path]:
        """Hold the lock of ``key``'s shard (waiting for any other writer of it, in any
        process); the record's path. One file per shard, never removed: removing a lock
        file another process waits on would let a third lock a new one beside it. Its
        disk errors are ``_disk``'s; the block's own exceptions pass as they are."""
        path = self._path(key)
        with self._disk(key, done):
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(path.parent / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            with self._disk(key, done):
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield path
        finally:
            os.close(fd)  # releases the lock

    async def put(self, key: TokenKey, record: bytes) -> None:
        """Write ``record`` under ``key`` (a temporary file, synced, renamed over the old
        one: a reader sees the old record or the new one, never part of one, after a
        host crash too). In a thread: the syncs block for milliseconds."""
        await asyncio.to_thread(self._put, key, record)

    def _put(self, key: TokenKey, record: bytes) -> None:
        with self._locked(key, "stored") as path, self._disk(key, "stored"):
            self._write(path, record)

    async def update(self, key: TokenKey, change: Change) -> None:
        """Replace the record under ``key`` by ``change(record)``, holding the shard's
        lock from the read to the write (in a thread, ``change`` included)."""
        await asyncio.to_thread(self._update, key, change)

    def _update(self, key: TokenKey, change: Change) -> None:
        with self._locked(key, "updated") as path:
            with self._disk(key, "updated"):
                current = self._read(path)
            new = change(current)  # what it raises is its own, never the disk's
            if new == current:
                return
            with self._disk(key, "updated"):
                if new is None:
                    self._remove(path)
                else:
                    self._write(path, new)

    @staticmethod
    def _write(path: Path, record: bytes) -> None:
        sweep_temporary(path.parent, ".put-")
        tmp = path.parent / f".put-{secrets.token_hex(8)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(record)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
            sync_directory(path.parent)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    async def delete(self, key: TokenKey) -> None:
        """Remove the record under ``key``, if any (in a thread: it waits for the lock)."""
        await asyncio.to_thread(self._delete, key)

    def _delete(self, key: TokenKey) -> None:
        if not self._path(key).parent.is_dir():
            return  # no record of the shard was ever written here: nothing to lock
        with self._locked(key, "deleted") as path, self._disk(key, "deleted"):
            self._remove(path)

    @staticmethod
    def _remove(path: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


class _SealedTokens(abc.ABC):
    """A TokenStore whose records are sealed before ``inner`` stores them."""

    inner: TokenStore

    @abc.abstractmethod
    def _seal(self, key: TokenKey, record: bytes) -> bytes:
        """``record`` sealed, to be stored under ``key``."""

    @abc.abstractmethod
    def _open(self, key: TokenKey, sealed: bytes) -> bytes:
        """What ``_seal`` sealed under ``key``.

        Raises:
            NotFound: sealed for another tenant (the record is then absent).
            AccessDenied: not sealed with the cipher's keys, or altered.
        """

    async def get(self, key: TokenKey) -> bytes | None:
        """The opened record under ``key``; None when there is none, or it was sealed
        for another tenant.

        Raises:
            AccessDenied: the record is not sealed with the cipher's keys, or was altered.
        """
        sealed = await self.inner.get(key)
        if sealed is None:
            return None
        try:
            return self._open(key, sealed)
        except NotFound:
            return None

    async def put(self, key: TokenKey, record: bytes) -> None:
        """Seal ``record`` and store it under ``key``."""
        await self.inner.put(key, self._seal(key, record))

    async def delete(self, key: TokenKey) -> None:
        """Forget the record under ``key``."""
        await self.inner.delete(key)

    async def update(self, key: TokenKey, change: Change) -> None:
        """``change`` the opened record under ``key`` as one step of ``inner`` (a record
        sealed for another tenant is None to it, as to ``get``), sealing its answer.

        Raises:
            AccessDenied: the record is not sealed with the cipher's keys, or was altered.
            Exception: what ``change`` raises (nothing is written).
        """

        def sealed_change(sealed: bytes | None) -> bytes | None:
            opened = None
            if sealed is not None:
                with contextlib.suppress(NotFound):
                    opened = self._open(key, sealed)
            new = change(opened)
            if new == opened:
                return sealed
            return None if new is None else self._seal(key, new)

        await self.inner.update(key, sealed_change)


class EncryptedTokenStore(_SealedTokens):
    """A TokenStore whose records ``cipher`` seals before ``inner`` stores them.

    With the payload codec's cipher (``PsychCodec.blob_cipher()``) a record is sealed for
    the tenant of the Run whose activity stores it, so a record read by another tenant's
    activity is absent for it (the cipher's ``NotFound``), not readable.
    """

    def __init__(self, inner: TokenStore, cipher: BlobCipher) -> None:
        self.inner = inner
        self.cipher = cipher

    def _seal(self, key: TokenKey, record: bytes) -> bytes:
        return self.cipher.seal(record)

    def _open(self, key: TokenKey, sealed: bytes) -> bytes:
        return self.cipher.open(sealed)


class TenantSealedTokens(_SealedTokens):
    """A TokenStore whose records are sealed for the tenant their key names, by a process
    that acts for that tenant outside any Run (``psych serve``: the A2A push records of
    the callers it authenticated, and the peer pushes its workers recorded). A record is
    the same bytes ``EncryptedTokenStore`` writes in an activity of that tenant's Run, so
    either opens the other's; one under another tenant's key opens for no one (None).
    """

    def __init__(self, inner: TokenStore, cipher: TenantCipher) -> None:
        self.inner = inner
        self.cipher = cipher

    def _seal(self, key: TokenKey, record: bytes) -> bytes:
        return self.cipher.seal_for(key.tenant, record)

    def _open(self, key: TokenKey, sealed: bytes) -> bytes:
        return self.cipher.open_for(key.tenant, sealed)


def unsealed(store: TokenStore) -> TokenStore:
    """The store beneath any sealing, for records that hold no secret and are read and
    written outside a Run (the consent index, the A2A push index)."""
    if isinstance(store, _SealedTokens):
        return store.inner
    return store
