"""Blobs sealed for a tenant the caller names, outside any Run: ``TenantCipher`` (the port)
and ``TenantSealedBlobs`` (a BlobStore for one tenant)."""

from __future__ import annotations

from typing import Protocol

from psych_runtime.activities.blobs._store import BlobStore


class TenantCipher(Protocol):
    """Port: seals and opens bytes for a tenant named by the caller
    (``workers.PsychCodec.blob_cipher()``'s ``seal_for`` / ``open_for``)."""

    def seal_for(self, tenant: str, data: bytes) -> bytes:
        """``data`` sealed for ``tenant``."""
        ...

    def open_for(self, tenant: str, sealed: bytes) -> bytes:
        """What was sealed for ``tenant``.

        Raises:
            NotFound: sealed for another tenant.
            AccessDenied: not sealed with this cipher's keys, or altered.
        """
        ...


class TenantSealedBlobs:
    """A BlobStore whose blobs are sealed for one tenant, by a process that acts for it
    outside any Run (``psych report --inputs``, ``psych serve`` for the caller it
    authenticated). A blob is the same bytes an ``EncryptedBlobStore`` stores in an
    activity of that tenant's Run, so each reads the other's; one sealed for another tenant
    is not found (the cipher's ``NotFound``).
    """

    def __init__(self, inner: BlobStore, cipher: TenantCipher, tenant: str) -> None:
        self.inner = inner
        self.cipher = cipher
        self.tenant = tenant

    async def put(self, data: bytes) -> str:
        """Seal ``data`` for the tenant and store it; return the ref of the sealed bytes."""
        return await self.inner.put(self.cipher.seal_for(self.tenant, data))

    async def get(self, ref: str) -> bytes:
        """The plaintext stored under ``ref`` for the tenant.

        Raises:
            NotFound: nothing is stored under ``ref``, or it is sealed for another tenant.
            AccessDenied: not sealed with the cipher's keys, or altered.
        """
        return self.cipher.open_for(self.tenant, await self.inner.get(ref))
