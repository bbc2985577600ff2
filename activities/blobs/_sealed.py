"""The encrypting wrapper of a BlobStore: ``EncryptedBlobStore`` seals every blob with a
``BlobCipher`` (the port) before its inner store keeps it; a seal that does not open is
``BlobSealRefused``, naming the ref."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from psych_runtime.activities.blobs._store import (
    BlobSealRefused,
    BlobStore,
    ref_without_storing,
)
from psych_runtime.specs import AccessDenied


@runtime_checkable
class BlobCipher(Protocol):
    """Port: seals and opens blob bytes (``workers.PsychCodec.blob_cipher()`` seals with
    the payload keys, for the tenant of the Run whose activity runs now)."""

    def seal(self, data: bytes) -> bytes:
        """``data`` encrypted."""
        ...

    def open(self, sealed: bytes) -> bytes:
        """What ``seal`` sealed.

        Raises:
            NotFound: sealed for another tenant than the running Run's.
            AccessDenied: not sealed with this cipher's keys, or altered.
        """
        ...


class EncryptedBlobStore:
    """A BlobStore whose blobs are sealed by a ``BlobCipher`` before ``inner`` stores them.

    Refs are ``inner``'s refs of the sealed bytes, so on disk (or in a bucket) neither a
    blob nor its name says anything about its content to anyone without the key.
    """

    def __init__(self, inner: BlobStore, cipher: BlobCipher) -> None:
        self.inner = inner
        self.cipher = cipher

    def ref_of(self, data: bytes) -> str | None:
        """The ref of ``data`` sealed, if ``inner`` can tell (``KnowsRefs``): what ``put``
        returns, as psych's cipher seals the same data alike under the same key."""
        return ref_without_storing(self.inner, self.cipher.seal(data))

    async def put(self, data: bytes) -> str:
        """Seal and store ``data``; return the ref of the sealed bytes."""
        return await self.inner.put(self.cipher.seal(data))

    async def get(self, ref: str) -> bytes:
        """The plaintext stored under ``ref``.

        Raises:
            NotFound: nothing is stored under ``ref`` for this Run's tenant.
            BlobSealRefused: an ``AccessDenied`` naming ``ref``: the blob is not sealed
                with the cipher's keys, or was altered (the cipher's refusal is its cause).
        """
        sealed = await self.inner.get(ref)
        try:
            return self.cipher.open(sealed)
        except AccessDenied as err:
            raise BlobSealRefused(ref) from err
