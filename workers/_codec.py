"""Encrypted payloads and blobs: the keyring, the key-provider port, the payload codec.

Every payload a psych client or worker hands to Temporal (workflow inputs and results,
activity inputs and results, signals, updates, queries, failures' messages, summaries) is
sealed with AES-256-GCM under the current key of the Run's tenant; the blob store seals
with the same keys (``blob_cipher``). Nothing decrypts without the key, and each key
belongs to one tenant.

How the codec knows a payload's tenant: Temporal hands every codec a serialization
context naming the workflow a payload belongs to (the Run, the child Run, or the Run an
activity works for), and a Run's workflow id is ``psych-<tenant>-<run id>``. An activity
completing through a task token (``_reporting.py``) gets no context from the SDK; the codec
then reads the workflow id of the activity it runs in. A payload whose tenant cannot be
told is refused, never sealed under a guessed key.

Sealed payload: metadata ``encoding: binary/encrypted``, ``encryption-key-id: <key id>``,
``psych-tenant: <tenant>``; data: a 12-byte random nonce, then the ciphertext of the whole
serialized inner Payload (its metadata too). The key id and the tenant are bound to the
ciphertext as associated data, so neither can be relabelled. Decoding picks the key by its
id (so keys rotated out of ``current`` still decrypt) and, with a context, refuses a
payload sealed for another tenant than the Run's: tenant B's key holder cannot write into
tenant A's Runs.

The keys file (``PSYCH_CODEC_KEY_FILE``) or variable (``PSYCH_CODEC_KEYS``) is JSON::

    {"current": {"acme": "acme-2", "*": "shared-1"},
     "keys": [{"id": "acme-2", "tenant": "acme", "secret": "<base64 of 32 bytes>"},
              {"id": "acme-1", "tenant": "acme", "secret": "..."},
              {"id": "shared-1", "tenant": "*", "secret": "..."}]}

``current`` names the key each tenant's new payloads are sealed with; tenant ``*`` is the
shared key of every tenant without one of its own. Every key listed decrypts.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, Self, runtime_checkable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio import activity
from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    ActivitySerializationContext,
    PayloadCodec,
    SerializationContext,
    WithSerializationContext,
    WorkflowSerializationContext,
)

from psych_runtime.specs import AccessDenied, NotFound, SpecError
from psych_runtime.workflows import parse_workflow_id

ENCODING = b"binary/encrypted"
"""The ``encoding`` metadata of a sealed payload (what Temporal's samples use too)."""
KEY_ID = "encryption-key-id"
"""Metadata naming the key a payload is sealed with."""
TENANT = "psych-tenant"
"""Metadata naming the tenant a payload is sealed for."""
SHARED = "*"
"""The tenant of a shared key: it serves every tenant without a key of its own."""

ENV_KEYS = "PSYCH_CODEC_KEYS"
ENV_KEY_FILE = "PSYCH_CODEC_KEY_FILE"
ENV_ACCEPT_PLAINTEXT = "PSYCH_CODEC_ACCEPT_PLAINTEXT"

_NONCE = 12
_KEY_ID_CHARS = re.compile(r"[A-Za-z0-9._:-]{1,64}")
_TENANT_CHARS = re.compile(r"[a-zA-Z0-9_.]{1,128}")
"""What ``Scope.tenant`` accepts."""
_BLOB_MAGIC = b"psych-blob-v1\0"


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
            AccessDenied: the ciphertext, key id or tenant was altered.
        """
        try:
            return self._ciphers[key.id].decrypt(
                sealed[:_NONCE], sealed[_NONCE:], _aad(key.id, tenant)
            )
        except InvalidTag:
            raise AccessDenied(
                f"a payload sealed with key {key.id!r} for tenant {tenant!r} does not "
                "authenticate: it was altered, or relabelled from another key or tenant"
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


def codec_from_env(environ: Mapping[str, str] | None = None) -> PsychCodec | None:
    """The codec the environment configures, or None when it configures none (encryption
    is off unless ``PSYCH_CODEC_KEYS`` or ``PSYCH_CODEC_KEY_FILE`` is set).

    ``PSYCH_CODEC_ACCEPT_PLAINTEXT=1`` lets it decode payloads that are not encrypted, for
    Runs started before encryption was turned on (see ``PsychCodec``).

    Raises:
        SpecError: the keys are malformed or cannot be read.
    """
    env = os.environ if environ is None else environ
    if not (env.get(ENV_KEYS, "").strip() or env.get(ENV_KEY_FILE, "").strip()):
        return None
    accept = env.get(ENV_ACCEPT_PLAINTEXT, "").strip().lower() in ("1", "true", "yes", "on")
    return PsychCodec(EnvKeyProvider(env).keyring(), accept_plaintext=accept)


def tenant_of(workflow_id: str) -> str | None:
    """The tenant of a Run's workflow id (``psych-<tenant>-<run id>``), None for another id."""
    try:
        tenant, _ = parse_workflow_id(workflow_id)
    except NotFound:
        return None
    return tenant or None


def _context_tenant(context: SerializationContext | None) -> tuple[str | None, str | None]:
    """(tenant, workflow id) a payload belongs to: the serialization context's workflow,
    else the workflow of the activity running now (a task-token completion has no
    context), else neither."""
    workflow_id: str | None = None
    if isinstance(context, WorkflowSerializationContext | ActivitySerializationContext):
        workflow_id = context.workflow_id
    elif context is None and activity.in_activity():
        workflow_id = activity.info().workflow_id
    if workflow_id is None:
        return None, None
    return tenant_of(workflow_id), workflow_id


class PsychCodec(PayloadCodec, WithSerializationContext):
    """AES-256-GCM payload codec with a key per tenant (see the module docstring).

    Give a client only the keys of the tenant it serves (``Keyring.for_tenant``): it
    then cannot read, start or signal another tenant's Runs. A worker holds every
    tenant's keys: it runs them all.

    Args:
        keyring: the keys.
        accept_plaintext: decode payloads that are not encrypted instead of refusing
            them. Off by default: a worker that accepts plaintext lets anyone with
            namespace access signal or start Runs without a key. Turn it on only while
            Runs started before encryption are still open.
    """

    def __init__(
        self,
        keyring: Keyring,
        *,
        accept_plaintext: bool = False,
        context: SerializationContext | None = None,
    ) -> None:
        self.keyring = keyring
        self.accept_plaintext = accept_plaintext
        self._context = context

    def with_context(self, context: SerializationContext) -> Self:
        """This codec for payloads of the workflow or activity ``context`` names."""
        return type(self)(self.keyring, accept_plaintext=self.accept_plaintext, context=context)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Seal each payload under the current key of its Run's tenant.

        Raises:
            AccessDenied: the tenant cannot be told, or no key encrypts for it.
        """
        tenant, workflow_id = _context_tenant(self._context)
        if tenant is None:
            raise AccessDenied(
                "refusing to encode a payload whose tenant cannot be told: "
                + (
                    f"workflow id {workflow_id!r} is not a psych Run id"
                    if workflow_id
                    else "it names no workflow"
                )
            )
        return self.seal_for(tenant, payloads)

    def seal_for(self, tenant: str, payloads: Sequence[Payload]) -> list[Payload]:
        """Seal ``payloads`` for ``tenant`` (what ``encode`` does once it knows the tenant;
        the codec server, told its tenant, calls it directly).

        Raises:
            AccessDenied: no key encrypts for ``tenant``.
        """
        key = self.keyring.encrypting(tenant)
        metadata = {"encoding": ENCODING, KEY_ID: key.id.encode(), TENANT: tenant.encode()}
        return [
            Payload(
                metadata=metadata,
                data=self.keyring.seal(key, tenant, payload.SerializeToString()),
            )
            for payload in payloads
        ]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Open each sealed payload with the key its metadata names.

        Raises:
            AccessDenied: a payload is not encrypted (unless ``accept_plaintext``), is
                sealed with a key this keyring does not hold, for another tenant than
                its Run's, or does not authenticate.
        """
        expected, workflow_id = _context_tenant(self._context)
        return [self.open(payload, expected, workflow_id) for payload in payloads]

    def open(
        self, payload: Payload, expected: str | None = None, workflow_id: str | None = None
    ) -> Payload:
        """One payload opened (``decode`` of one), refused unless sealed for ``expected``
        when that is given; ``workflow_id`` only names the Run in error messages.

        Raises:
            AccessDenied: as ``decode``.
        """
        if payload.metadata.get("encoding") != ENCODING:
            if self.accept_plaintext:
                return payload
            raise AccessDenied(
                f"refusing a payload that is not encrypted{_of(workflow_id)}: psych encrypts "
                "every payload, so it was written without the keys (set "
                f"{ENV_ACCEPT_PLAINTEXT}=1 only while Runs from before encryption are open)"
            )
        key_id = payload.metadata.get(KEY_ID, b"").decode()
        tenant = payload.metadata.get(TENANT, b"").decode()
        if expected is not None and tenant != expected:
            raise AccessDenied(
                f"refusing a payload sealed for tenant {tenant!r} (key {key_id!r}): "
                + (
                    f"{workflow_id} is a Run of tenant {expected!r}"
                    if workflow_id
                    else f"only tenant {expected!r}'s payloads are opened here"
                )
            )
        key = self.keyring.decrypting(key_id, tenant)
        return Payload.FromString(self.keyring.open(key, tenant, payload.data))

    def blob_cipher(self) -> KeyringBlobCipher:
        """The blob cipher sealing with the same keys (``EncryptedBlobStore``)."""
        return KeyringBlobCipher(self.keyring)


def _of(workflow_id: str | None) -> str:
    return f" of {workflow_id}" if workflow_id else ""


class KeyringBlobCipher:
    """Seals blobs for the tenant of the activity running now (``BlobCipher``).

    A sealed blob is ``psych-blob-v1\\0``, the key id and the tenant (each one length
    byte, then the text), a content-derived nonce, and the AES-GCM ciphertext. Blob refs
    are then hashes of ciphertext: they say nothing about the content to anyone without
    the key, and two tenants' equal content never shares a blob.
    """

    def __init__(self, keyring: Keyring) -> None:
        self.keyring = keyring

    def seal(self, data: bytes) -> bytes:
        """``data`` sealed under the current key of the running activity's tenant.

        Raises:
            AccessDenied: not inside a psych Run's activity, or no key for its tenant.
        """
        tenant = _running_tenant("store")
        key = self.keyring.encrypting(tenant)
        header = _BLOB_MAGIC + _short(key.id) + _short(tenant)
        nonce = self.keyring.blob_nonce(key, tenant, data)
        return header + self.keyring.seal(key, tenant, data, nonce)

    def open(self, sealed: bytes) -> bytes:
        """What ``seal`` sealed, for an activity of the same tenant.

        Raises:
            NotFound: sealed for another tenant.
            AccessDenied: not sealed by psych, sealed with a key not held here, or altered.
        """
        tenant = _running_tenant("read")
        if not sealed.startswith(_BLOB_MAGIC):
            raise AccessDenied("refusing a blob that is not encrypted")
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


def chain_codecs(first: PayloadCodec, then: PayloadCodec) -> PayloadCodec:
    """A codec encoding with ``first`` then ``then`` (and decoding in reverse order), so
    a codec the user installed (compression, say) keeps running under the encryption."""
    return _Chained(first, then)


class _Chained(PayloadCodec, WithSerializationContext):
    def __init__(self, first: PayloadCodec, then: PayloadCodec) -> None:
        self.first, self.then = first, then

    def with_context(self, context: SerializationContext) -> Self:
        def bound(codec: PayloadCodec) -> PayloadCodec:
            if isinstance(codec, WithSerializationContext):
                return codec.with_context(context)
            return codec

        return type(self)(bound(self.first), bound(self.then))

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return await self.then.encode(await self.first.encode(payloads))

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return await self.first.decode(await self.then.decode(payloads))


def find_psych_codec(codec: PayloadCodec | None) -> PsychCodec | None:
    """The PsychCodec inside a client's payload codec (alone or chained), if any."""
    if isinstance(codec, PsychCodec):
        return codec
    if isinstance(codec, _Chained):
        return find_psych_codec(codec.then) or find_psych_codec(codec.first)
    return None
