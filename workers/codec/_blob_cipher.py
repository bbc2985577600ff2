"""Encrypted blobs: ``KeyringBlobCipher`` seals each blob for the tenant of the activity
storing it, with the codec's keys (``EncryptedBlobStore``'s ``BlobCipher``)."""

from __future__ import annotations

from temporalio import activity

from psych_runtime.specs import AccessDenied, NotFound
from psych_runtime.workers.codec._keys import Keyring, tenant_of

_BLOB_MAGIC = b"psych-blob-v1\0"


class KeyringBlobCipher:
    """Seals blobs for the tenant of the activity running now (``BlobCipher``).

    A sealed blob is ``psych-blob-v1\\0``, the key id and the tenant (each one length
    byte, then the text), a content-derived nonce, and the AES-GCM ciphertext. Blob refs
    are then hashes of ciphertext: they say nothing about the content to anyone without
    the key, and two tenants' equal content never shares a blob.
    """

    def __init__(self, keyring: Keyring, *, accept_plaintext: bool = False) -> None:
        """Seal with ``keyring``; ``accept_plaintext``: open a blob stored before encryption
        was turned on as it is (as ``PsychCodec`` accepts such a Run's history), instead
        of refusing it."""
        self.keyring = keyring
        self.accept_plaintext = accept_plaintext

    def seal(self, data: bytes) -> bytes:
        """``data`` sealed under the current key of the running activity's tenant.

        Raises:
            AccessDenied: not inside a psych Run's activity, or no key for its tenant.
        """
        return self.seal_for(_running_tenant("store"), data)

    def open(self, sealed: bytes) -> bytes:
        """What ``seal`` sealed, for an activity of the same tenant.

        Raises:
            NotFound: sealed for another tenant.
            AccessDenied: not sealed by psych, sealed with a key not held here, or altered.
        """
        return self.open_for(_running_tenant("read"), sealed)

    def seal_for(self, tenant: str, data: bytes) -> bytes:
        """``data`` sealed for ``tenant``, by a caller that acts for it outside a Run
        (``psych serve``, for the caller it authenticated); the same bytes ``seal`` makes
        in an activity of that tenant's Run.

        Raises:
            AccessDenied: no key for ``tenant``.
        """
        key = self.keyring.encrypting(tenant)
        header = _BLOB_MAGIC + _short(key.id) + _short(tenant)
        nonce = self.keyring.blob_nonce(key, tenant, data)
        return header + self.keyring.seal(key, tenant, data, nonce)

    def open_for(self, tenant: str, sealed: bytes) -> bytes:
        """What was sealed for ``tenant`` (by ``seal_for``, or ``seal`` in its Run).

        Raises:
            NotFound: sealed for another tenant.
            AccessDenied: not sealed by psych (unless ``accept_plaintext``), sealed with a
                key not held here, or altered.
        """
        if not sealed.startswith(_BLOB_MAGIC):
            if self.accept_plaintext:
                return sealed
            raise AccessDenied(
                "refusing a blob that is not encrypted (set PSYCH_CODEC_ACCEPT_PLAINTEXT=1 "
                "only while Runs from before encryption are open)"
            )
        rest = sealed[len(_BLOB_MAGIC) :]
        key_id, rest = _unshort(rest)
        owner, rest = _unshort(rest)
        if owner != tenant:
            # Not found, rather than denied: a Run (read_tool_output with a handle it was
            # given) must not learn that another tenant stored something under a ref.
            raise NotFound(f"no blob of tenant {tenant!r} under this ref")
        key = self.keyring.decrypting(key_id, owner)
        return self.keyring.open(key, owner, rest)


def _running_tenant(doing: str) -> str:
    if not activity.in_activity():
        raise AccessDenied(f"cannot {doing} an encrypted blob outside a Run's activity")
    workflow_id = activity.info().workflow_id or ""
    tenant = tenant_of(workflow_id)
    if tenant is None:
        raise AccessDenied(f"cannot {doing} an encrypted blob for {workflow_id!r}: not a psych Run")
    return tenant


def _short(text: str) -> bytes:
    data = text.encode()
    return bytes([len(data)]) + data


def _unshort(data: bytes) -> tuple[str, bytes]:
    if not data or len(data) < 1 + data[0]:
        raise AccessDenied("an encrypted blob's header is cut short")
    size = data[0]
    return data[1 : 1 + size].decode(errors="replace"), data[1 + size :]
