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

import os
from collections.abc import Mapping, Sequence
from typing import Self

from temporalio import activity
from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    ActivitySerializationContext,
    PayloadCodec,
    SerializationContext,
    WithSerializationContext,
    WorkflowSerializationContext,
)

from psych_runtime.specs import AccessDenied, SpecError, env_flag
from psych_runtime.workers.codec._blob_cipher import KeyringBlobCipher
from psych_runtime.workers.codec._keys import (
    ENV_ACCEPT_PLAINTEXT,
    ENV_KEY_FILE,
    ENV_KEYS,
    EnvKeyProvider,
    Keyring,
    tenant_of,
)

ENCODING = b"binary/encrypted"
"""The ``encoding`` metadata of a sealed payload (what Temporal's samples use too)."""
KEY_ID = "encryption-key-id"
"""Metadata naming the key a payload is sealed with."""
TENANT = "psych-tenant"
"""Metadata naming the tenant a payload is sealed for."""


def codec_from_env(environ: Mapping[str, str] | None = None) -> PsychCodec | None:
    """The codec the environment configures, or None when it configures none (encryption
    is off unless ``PSYCH_CODEC_KEYS`` or ``PSYCH_CODEC_KEY_FILE`` is set).

    ``PSYCH_CODEC_ACCEPT_PLAINTEXT=1`` lets it decode payloads that are not encrypted, for
    Runs started before encryption was turned on (see ``PsychCodec``).

    Raises:
        SpecError: the keys are malformed or cannot be read; a variable set but empty;
            ``PSYCH_CODEC_ACCEPT_PLAINTEXT`` neither yes nor no.
    """
    env = os.environ if environ is None else environ
    for name in (ENV_KEYS, ENV_KEY_FILE):
        if name in env and not env[name].strip():
            # Read as unset, it would run without encryption: a typo in a deployment's
            # secret wiring must not turn encryption off silently.
            raise SpecError(
                f"{name} is set but empty: give the keys, or unset it to run without encryption"
            )
    if ENV_KEYS not in env and ENV_KEY_FILE not in env:
        return None
    accept_plaintext = env_flag(env, ENV_ACCEPT_PLAINTEXT)
    return PsychCodec(EnvKeyProvider(env).keyring(), accept_plaintext=accept_plaintext)


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
        try:
            key_id = payload.metadata.get(KEY_ID, b"").decode()
            tenant = payload.metadata.get(TENANT, b"").decode()
        except UnicodeDecodeError:
            raise AccessDenied(
                f"refusing a payload{_of(workflow_id)} marked encrypted whose key id or "
                "tenant is not UTF-8 text"
            ) from None
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
        """The blob cipher sealing with the same keys (``EncryptedBlobStore``), accepting
        plaintext blobs when this codec accepts plaintext payloads: a Run from before
        encryption has both."""
        return KeyringBlobCipher(self.keyring, accept_plaintext=self.accept_plaintext)


def _of(workflow_id: str | None) -> str:
    return f" of {workflow_id}" if workflow_id else ""


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
