"""The codec's keys: a ``Key``, the ``Keyring`` of every tenant's keys (which seals and opens
with AES-256-GCM), the ``KeyProvider`` port and its file and environment providers, and the
tenant a Run's workflow id names."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from psych_runtime.specs import AccessDenied, NotFound, SpecError
from psych_runtime.workflows import parse_workflow_id

SHARED = "*"
"""The tenant of a shared key: it serves every tenant without a key of its own."""

ENV_KEYS = "PSYCH_CODEC_KEYS"
ENV_KEY_FILE = "PSYCH_CODEC_KEY_FILE"
ENV_ACCEPT_PLAINTEXT = "PSYCH_CODEC_ACCEPT_PLAINTEXT"

_NONCE = 12
_TAG = 16
"""AES-GCM's authentication tag, at the end of every ciphertext."""
_KEY_ID_CHARS = re.compile(r"[A-Za-z0-9._:-]{1,64}")
_TENANT_CHARS = re.compile(r"[a-zA-Z0-9_.]{1,128}")
"""What ``Scope.tenant`` accepts."""


@dataclass(frozen=True)
class Key:
    """One AES-256 key of the keyring.

    Attributes:
        id: its name, written into every payload it seals (letters, digits, ``._:-``).
        tenant: the tenant it belongs to, or ``*`` for a key shared by every tenant
            without one of its own.
        secret: the 32 key bytes (never printed).
    """

    id: str
    tenant: str
    secret: bytes = field(repr=False)


class Keyring:
    """Keys by id, and which key each tenant's new payloads are sealed with.

    Args:
        keys: every key that decrypts.
        current: tenant (or ``*``) -> id of the key that encrypts for it.

    Raises:
        SpecError: a duplicate or malformed id, a secret that is not 32 bytes, a tenant
            that no Scope could name (letters, digits, ``_`` and ``.``), a ``current``
            entry naming an unknown key or another tenant's key.
    """

    def __init__(self, keys: Iterable[Key], current: Mapping[str, str]) -> None:
        self._keys: dict[str, Key] = {}
        for key in keys:
            if not _KEY_ID_CHARS.fullmatch(key.id):
                raise SpecError(f"key id {key.id!r}: 1-64 letters, digits and '._:-' only")
            if key.id in self._keys:
                raise SpecError(f"key id {key.id!r} is listed twice")
            if key.tenant != SHARED and not _TENANT_CHARS.fullmatch(key.tenant):
                raise SpecError(f"key {key.id!r}: tenant {key.tenant!r} is not a psych tenant")
            if len(key.secret) != 32:
                raise SpecError(f"key {key.id!r}: the secret must be 32 bytes (AES-256)")
            self._keys[key.id] = key
        for tenant, key_id in current.items():
            if key_id not in self._keys:
                raise SpecError(f"current key {key_id!r} of tenant {tenant!r} is not listed")
            if self._keys[key_id].tenant != tenant:
                raise SpecError(
                    f"current key {key_id!r} of tenant {tenant!r} belongs to tenant "
                    f"{self._keys[key_id].tenant!r}"
                )
        self._current = dict(current)
        self._ciphers = {key_id: AESGCM(key.secret) for key_id, key in self._keys.items()}
        self._blob_macs = {
            key_id: hmac.digest(key.secret, b"psych blob nonce", "sha256")
            for key_id, key in self._keys.items()
        }

    @classmethod
    def from_json(cls, text: str, *, source: str) -> Keyring:
        """A keyring from the JSON format in the module docstring.

        Raises:
            SpecError: the text is not that format; the message names ``source``.
        """
        try:
            document = json.loads(text)
            current = document["current"]
            entries = document["keys"]
            if not isinstance(current, dict) or not isinstance(entries, list):
                raise TypeError("'current' must be an object and 'keys' a list")
            keys = [
                Key(
                    id=str(entry["id"]),
                    tenant=str(entry["tenant"]),
                    secret=base64.b64decode(entry["secret"], validate=True),
                )
                for entry in entries
            ]
        except (ValueError, KeyError, TypeError, binascii.Error) as err:
            raise SpecError(
                f'{source}: not a psych keyring ({{"current": {{tenant: key id}}, "keys": '
                f'[{{"id", "tenant", "secret": base64}}]}}): {err}'
            ) from err
        try:
            return cls(keys, {str(tenant): str(key_id) for tenant, key_id in current.items()})
        except SpecError as err:
            raise SpecError(f"{source}: {err}") from err

    @property
    def tenants(self) -> frozenset[str]:
        """Every tenant some key belongs to (``*`` for shared keys)."""
        return frozenset(key.tenant for key in self._keys.values())

    def for_tenant(self, tenant: str) -> Keyring:
        """The part of this keyring one tenant may hold: its keys and the shared ones.

        The shared keys open and seal the Runs of every tenant without a key of its own,
        so a tenant given them can read and write those Runs too (``docs/guides/trust.md``).

        Raises:
            SpecError: nothing here encrypts for ``tenant``.
        """
        keys = [key for key in self._keys.values() if key.tenant in (tenant, SHARED)]
        current = {t: k for t, k in self._current.items() if t in (tenant, SHARED)}
        if not current:
            raise SpecError(f"the keyring has no key that encrypts for tenant {tenant!r}")
        return Keyring(keys, current)

    def encrypting(self, tenant: str) -> Key:
        """The key new payloads of ``tenant`` are sealed with.

        Raises:
            AccessDenied: the keyring holds no key for ``tenant`` (nor a shared one).
        """
        key_id = self._current.get(tenant, self._current.get(SHARED))
        if key_id is None:
            raise AccessDenied(
                f"no encryption key for tenant {tenant!r}: this keyring encrypts for "
                f"{_listed(self._current)}"
            )
        return self._keys[key_id]

    def decrypting(self, key_id: str, tenant: str) -> Key:
        """The key a payload sealed with ``key_id`` for ``tenant`` opens with.

        Raises:
            AccessDenied: the key is not held here, or belongs to another tenant.
        """
        key = self._keys.get(key_id)
        if key is None:
            raise AccessDenied(
                f"cannot decrypt a payload of tenant {tenant!r}: it is sealed with key "
                f"{key_id!r}, which this keyring does not hold (it holds keys of "
                f"{_listed(self.tenants)})"
            )
        if key.tenant not in (tenant, SHARED):
            raise AccessDenied(
                f"payload says tenant {tenant!r} but its key {key_id!r} is tenant {key.tenant!r}'s"
            )
        return key

    def seal(self, key: Key, tenant: str, plaintext: bytes, nonce: bytes | None = None) -> bytes:
        """``nonce`` + AES-GCM ciphertext of ``plaintext``, bound to the key id and tenant."""
        nonce = os.urandom(_NONCE) if nonce is None else nonce
        return nonce + self._ciphers[key.id].encrypt(nonce, plaintext, _aad(key.id, tenant))

    def open(self, key: Key, tenant: str, sealed: bytes) -> bytes:
        """The plaintext of what ``seal`` returned.

        Raises:
            AccessDenied: the ciphertext, key id or tenant was altered, or it is cut short.
        """
        if len(sealed) < _NONCE + _TAG:
            raise AccessDenied(
                f"a payload sealed with key {key.id!r} for tenant {tenant!r} is cut short: "
                f"{len(sealed)} bytes, fewer than a nonce and an authentication tag"
            )
        try:
            return self._ciphers[key.id].decrypt(
                sealed[:_NONCE], sealed[_NONCE:], _aad(key.id, tenant)
            )
        except InvalidTag:
            raise AccessDenied(
                f"a payload sealed with key {key.id!r} for tenant {tenant!r} does not "
                f"authenticate: the key {key.id!r} held here is not the one it was sealed "
                "with (the same id with another secret), or the payload was altered or "
                "relabelled from another key or tenant"
            ) from None

    def blob_nonce(self, key: Key, tenant: str, data: bytes) -> bytes:
        """A nonce derived from the content (SIV-style), so one tenant's equal blobs seal
        to equal bytes and keep one ref, and a nonce repeats only with its plaintext."""
        mac = hmac.new(self._blob_macs[key.id], tenant.encode() + b"\0" + data, hashlib.sha256)
        return mac.digest()[:_NONCE]


def _aad(key_id: str, tenant: str) -> bytes:
    return b"psych-payload-v1\0" + key_id.encode() + b"\0" + tenant.encode()


def _listed(tenants: Iterable[str]) -> str:
    names = sorted(tenants)
    return ", ".join(repr(name) for name in names) if names else "no tenant"


@runtime_checkable
class KeyProvider(Protocol):
    """Port: where the keyring comes from (a file, a variable, a KMS, a vault)."""

    def keyring(self) -> Keyring:
        """The keys, read now.

        Raises:
            SpecError: the keys cannot be read or are malformed.
        """
        ...


@dataclass(frozen=True)
class FileKeyProvider:
    """The keyring from a JSON file (the format in the module docstring)."""

    path: Path

    def keyring(self) -> Keyring:
        """The keys in the file, read now."""
        try:
            text = self.path.read_text()
        except OSError as err:
            raise SpecError(f"cannot read the keys file {str(self.path)!r}: {err}") from err
        return Keyring.from_json(text, source=str(self.path))


@dataclass(frozen=True)
class EnvKeyProvider:
    """The keyring from ``PSYCH_CODEC_KEYS`` (JSON) or ``PSYCH_CODEC_KEY_FILE`` (a path)."""

    environ: Mapping[str, str]

    def keyring(self) -> Keyring:
        """The keys the environment names.

        Raises:
            SpecError: neither variable is set, or both are.
        """
        inline, path = self.environ.get(ENV_KEYS, ""), self.environ.get(ENV_KEY_FILE, "")
        if inline.strip() and path.strip():
            raise SpecError(f"set {ENV_KEYS} or {ENV_KEY_FILE}, not both")
        if path.strip():
            return FileKeyProvider(Path(path)).keyring()
        if inline.strip():
            return Keyring.from_json(inline, source=ENV_KEYS)
        raise SpecError(f"no keys: set {ENV_KEYS} (JSON) or {ENV_KEY_FILE} (a path)")


def tenant_of(workflow_id: str) -> str | None:
    """The tenant of a Run's workflow id (``psych-<tenant>-<run id>``), None for another id."""
    try:
        tenant, _ = parse_workflow_id(workflow_id)
    except NotFound:
        return None
    return tenant or None
