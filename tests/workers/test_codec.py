"""The payload codec and the encrypted blob store without a server: keys, rotation, tenant
isolation, tampering, plaintext refusal, and the plugin's wiring of the codec."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
from collections.abc import Sequence
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    ActivitySerializationContext,
    DataConverter,
    DefaultFailureConverterWithEncodedAttributes,
    PayloadCodec,
    WorkflowSerializationContext,
)
from temporalio.testing import ActivityEnvironment

from psych_runtime.activities import BlobSealRefused, EncryptedBlobStore, LocalBlobStore
from psych_runtime.activities.contract import TOOL_RUN_CODE
from psych_runtime.specs import AccessDenied, NotFound, SpecError
from psych_runtime.workers import (
    EnvKeyProvider,
    FileKeyProvider,
    Key,
    Keyring,
    PsychCodec,
    codec_from_env,
)
from psych_runtime.workers._plugin import _data_converter

SECRET = "the customer's card ends 4242"


def secret() -> bytes:
    return os.urandom(32)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


ACME_1, ACME_2, GLOBEX_1, SHARED_1 = (
    Key("acme-1", "acme", secret()),
    Key("acme-2", "acme", secret()),
    Key("globex-1", "globex", secret()),
    Key("shared-1", "*", secret()),
)


def ctx(workflow_id: str) -> WorkflowSerializationContext:
    return WorkflowSerializationContext(namespace="default", workflow_id=workflow_id)


def plain(text: str = SECRET) -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(text).encode())


async def seal(codec: PayloadCodec, workflow_id: str, *payloads: Payload) -> list[Payload]:
    assert isinstance(codec, PsychCodec)
    return await codec.with_context(ctx(workflow_id)).encode(payloads or [plain()])


async def unseal(codec: PsychCodec, workflow_id: str, payloads: Sequence[Payload]) -> list[Payload]:
    return await codec.with_context(ctx(workflow_id)).decode(payloads)


async def test_a_payload_is_sealed_under_its_tenants_current_key_and_opens_again() -> None:
    codec = PsychCodec(Keyring([ACME_1, GLOBEX_1], {"acme": "acme-1", "globex": "globex-1"}))
    (sealed,) = await seal(codec, "psych-acme-r1")
    assert sealed.metadata["encoding"] == b"binary/encrypted"
    assert sealed.metadata["encryption-key-id"] == b"acme-1"
    assert sealed.metadata["psych-tenant"] == b"acme"
    assert SECRET.encode() not in sealed.SerializeToString()
    assert b"json/plain" not in sealed.SerializeToString()  # the inner metadata is sealed too
    (opened,) = await unseal(codec, "psych-acme-r1", [sealed])
    assert opened == plain()
    (globex,) = await seal(codec, "psych-globex-r9")
    assert globex.metadata["encryption-key-id"] == b"globex-1"


async def test_rotation_old_keys_decrypt_the_current_key_encrypts() -> None:
    before = PsychCodec(Keyring([ACME_1], {"acme": "acme-1"}))
    old = await seal(before, "psych-acme-r1")
    after = PsychCodec(Keyring([ACME_1, ACME_2], {"acme": "acme-2"}))
    assert await unseal(after, "psych-acme-r1", old) == [plain()]
    (new,) = await seal(after, "psych-acme-r1")
    assert new.metadata["encryption-key-id"] == b"acme-2"
    # Dropping the old key is what makes old payloads unreadable, and it says which key.
    dropped = PsychCodec(Keyring([ACME_2], {"acme": "acme-2"}))
    with pytest.raises(AccessDenied, match="sealed with key 'acme-1', which this keyring does"):
        await unseal(dropped, "psych-acme-r1", old)


async def test_tenant_b_key_fails_on_tenant_a_payloads_with_a_clear_error() -> None:
    worker = PsychCodec(Keyring([ACME_1, GLOBEX_1], {"acme": "acme-1", "globex": "globex-1"}))
    acme_payloads = await seal(worker, "psych-acme-r1")
    globex_client = PsychCodec(Keyring([GLOBEX_1], {"globex": "globex-1"}))
    with pytest.raises(AccessDenied) as denied:
        await unseal(globex_client, "psych-acme-r1", acme_payloads)
    assert str(denied.value) == (
        "cannot decrypt a payload of tenant 'acme': it is sealed with key 'acme-1', which "
        "this keyring does not hold (it holds keys of 'globex')"
    )
    # Nor can tenant B write into tenant A's Runs: there is no key to seal them with.
    with pytest.raises(AccessDenied, match="no encryption key for tenant 'acme'"):
        await seal(globex_client, "psych-acme-r1")


async def test_a_payload_sealed_for_another_tenant_is_refused_by_the_runs_worker() -> None:
    """Tenant B holding its own key cannot inject a signal into tenant A's Run: the worker
    holds both keys, but the payload is sealed for B and the Run is A's."""
    worker = PsychCodec(Keyring([ACME_1, GLOBEX_1], {"acme": "acme-1", "globex": "globex-1"}))
    globex_client = PsychCodec(Keyring([GLOBEX_1], {"globex": "globex-1"}))
    forged = await seal(globex_client, "psych-globex-r1")
    with pytest.raises(
        AccessDenied, match=r"sealed for tenant 'globex' .*psych-acme-r1 is a Run of tenant 'acme'"
    ):
        await unseal(worker, "psych-acme-r1", forged)


async def test_relabelled_or_altered_payloads_do_not_authenticate() -> None:
    codec = PsychCodec(Keyring([SHARED_1], {"*": "shared-1"}))
    (sealed,) = await seal(codec, "psych-acme-r1")
    relabelled = Payload()
    relabelled.CopyFrom(sealed)
    relabelled.metadata["psych-tenant"] = b"globex"  # the shared key serves globex too
    with pytest.raises(AccessDenied, match="does not authenticate"):
        await unseal(codec, "psych-globex-r1", [relabelled])
    altered = Payload()
    altered.CopyFrom(sealed)
    altered.data = sealed.data[:-1] + bytes([sealed.data[-1] ^ 1])
    with pytest.raises(AccessDenied, match="does not authenticate"):
        await unseal(codec, "psych-acme-r1", [altered])


async def test_a_key_with_the_right_id_and_another_secret_is_named_as_the_likely_cause() -> None:
    """The usual wrong key: a keys file whose 'acme-1' is not the 'acme-1' the Run was
    sealed with (regenerated, or copied wrong). The error used to speak only of tampering."""
    (sealed,) = await seal(PsychCodec(Keyring([ACME_1], {"acme": "acme-1"})), "psych-acme-r1")
    impostor = Key("acme-1", "acme", os.urandom(32))
    with pytest.raises(AccessDenied) as denied:
        await unseal(PsychCodec(Keyring([impostor], {"acme": "acme-1"})), "psych-acme-r1", [sealed])
    assert str(denied.value) == (
        "a payload sealed with key 'acme-1' for tenant 'acme' does not authenticate: the "
        "key 'acme-1' held here is not the one it was sealed with (the same id with another "
        "secret), or the payload was altered or relabelled from another key or tenant"
    )


async def test_plaintext_is_refused_unless_accepted_for_a_migration() -> None:
    keyring = Keyring([ACME_1], {"acme": "acme-1"})
    with pytest.raises(AccessDenied, match="not encrypted of psych-acme-r1"):
        await unseal(PsychCodec(keyring), "psych-acme-r1", [plain()])
    migrating = PsychCodec(keyring, accept_plaintext=True)
    assert await unseal(migrating, "psych-acme-r1", [plain()]) == [plain()]


async def test_a_payload_whose_tenant_cannot_be_told_is_not_sealed() -> None:
    codec = PsychCodec(Keyring([SHARED_1], {"*": "shared-1"}))
    with pytest.raises(AccessDenied, match="it names no workflow"):
        await codec.encode([plain()])
    with pytest.raises(AccessDenied, match="'orders-7' is not a psych Run id"):
        await seal(codec, "orders-7")
    activity_ctx = ActivitySerializationContext(
        namespace="default",
        activity_id="1",
        activity_type=TOOL_RUN_CODE,
        activity_task_queue="q",
        workflow_id="psych-acme-r1",
        workflow_type="AgentRun",
        is_local=False,
    )
    (sealed,) = await codec.with_context(activity_ctx).encode([plain()])
    assert sealed.metadata["psych-tenant"] == b"acme"


async def test_without_a_context_the_running_activity_names_the_tenant() -> None:
    """A task-token completion (``_reporting.py``) reaches the codec with no context."""
    codec = PsychCodec(Keyring([ACME_1], {"acme": "acme-1"}))
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, workflow_id="psych-acme-r1")

    async def encode() -> list[Payload]:
        return await codec.encode([plain()])

    (sealed,) = await env.run(encode)
    assert sealed.metadata["psych-tenant"] == b"acme"


def test_keyring_validation_names_the_problem() -> None:
    with pytest.raises(SpecError, match="current key 'acme-1' of tenant 'globex' belongs to"):
        Keyring([ACME_1], {"globex": "acme-1"})
    with pytest.raises(SpecError, match="'acme-9' of tenant 'acme' is not listed"):
        Keyring([ACME_1], {"acme": "acme-9"})
    with pytest.raises(SpecError, match="must be 32 bytes"):
        Keyring([Key("short", "acme", b"x" * 16)], {})
    with pytest.raises(SpecError, match="listed twice"):
        Keyring([ACME_1, ACME_1], {})
    for tenant in ("ac-me", "acme corp", ""):  # what no Scope could name
        with pytest.raises(SpecError, match="not a psych tenant"):
            Keyring([Key("k", tenant, secret())], {})
    with pytest.raises(SpecError, match=r"keys\.json: not a psych keyring"):
        Keyring.from_json('{"keys": []}', source="keys.json")
    with pytest.raises(SpecError, match="PSYCH_CODEC_KEYS: not a psych keyring"):
        Keyring.from_json(
            '{"current": {}, "keys": [{"id": "k", "tenant": "a", "secret": "not base64!"}]}',
            source="PSYCH_CODEC_KEYS",
        )


def keyring_json(*keys: Key, current: dict[str, str]) -> str:
    return json.dumps(
        {
            "current": current,
            "keys": [{"id": k.id, "tenant": k.tenant, "secret": b64(k.secret)} for k in keys],
        }
    )


async def test_key_providers_read_the_documented_format(tmp_path: Path) -> None:
    text = keyring_json(ACME_1, ACME_2, current={"acme": "acme-2"})
    path = tmp_path / "keys.json"
    path.write_text(text)
    from_file = FileKeyProvider(path).keyring()
    from_env = EnvKeyProvider({"PSYCH_CODEC_KEYS": text}).keyring()
    for keyring in (from_file, from_env):
        assert keyring.encrypting("acme").id == "acme-2"
        assert keyring.decrypting("acme-1", "acme").secret == ACME_1.secret
    with pytest.raises(SpecError, match="not both"):
        EnvKeyProvider({"PSYCH_CODEC_KEYS": text, "PSYCH_CODEC_KEY_FILE": str(path)}).keyring()
    with pytest.raises(SpecError, match="cannot read the keys file"):
        FileKeyProvider(tmp_path / "missing.json").keyring()
    assert codec_from_env({}) is None  # off unless configured
    codec = codec_from_env({"PSYCH_CODEC_KEY_FILE": str(path)})
    assert codec is not None and not codec.accept_plaintext
    migrating = codec_from_env({"PSYCH_CODEC_KEYS": text, "PSYCH_CODEC_ACCEPT_PLAINTEXT": "1"})
    assert migrating is not None and migrating.accept_plaintext
    # A variable set but empty, or a yes/no that is neither, is refused: read as unset or
    # as no, each would have run without what the operator asked for.
    for name in ("PSYCH_CODEC_KEYS", "PSYCH_CODEC_KEY_FILE"):
        with pytest.raises(SpecError, match=f"{name} is set but empty"):
            codec_from_env({name: " "})
    with pytest.raises(SpecError, match="PSYCH_CODEC_ACCEPT_PLAINTEXT='sure' is neither yes"):
        codec_from_env({"PSYCH_CODEC_KEYS": text, "PSYCH_CODEC_ACCEPT_PLAINTEXT": "sure"})


def test_for_tenant_keeps_only_that_tenants_and_the_shared_keys() -> None:
    keyring = Keyring(
        [ACME_1, GLOBEX_1, SHARED_1], {"acme": "acme-1", "globex": "globex-1", "*": "shared-1"}
    )
    acme = keyring.for_tenant("acme")
    assert acme.tenants == {"acme", "*"}
    with pytest.raises(AccessDenied, match="does not hold"):
        acme.decrypting("globex-1", "globex")
    assert acme.encrypting("initech").id == "shared-1"  # a tenant without keys of its own
    # ... and opens that tenant's Runs: the shared key is no one tenant's (the trust guide
    # says so, and to list none where tenants must be isolated).
    assert acme.decrypting("shared-1", "initech").id == "shared-1"
    with pytest.raises(SpecError, match="no key that encrypts for tenant 'initech'"):
        Keyring([ACME_1], {"acme": "acme-1"}).for_tenant("initech")


class Reversing(PayloadCodec):
    """A user's own codec: reverses the data (stands in for compression)."""

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [Payload(metadata={"encoding": b"reversed"}, data=p.data[::-1]) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [Payload(metadata={"encoding": b"json/plain"}, data=p.data[::-1]) for p in payloads]


async def test_the_plugin_adds_the_codec_after_the_users_and_encodes_failure_texts() -> None:
    codec = PsychCodec(Keyring([ACME_1], {"acme": "acme-1"}))
    alone = _data_converter(None, codec)
    assert alone.payload_codec is codec
    assert alone.failure_converter_class is DefaultFailureConverterWithEncodedAttributes
    assert _data_converter(None).payload_codec is None

    chained = _data_converter(DataConverter(payload_codec=Reversing()), codec)
    bound = chained.with_context(ctx("psych-acme-r1"))
    (sealed,) = await bound.encode([SECRET])
    assert sealed.metadata["encryption-key-id"] == b"acme-1"  # encryption is outermost
    inner = Payload.FromString(
        codec.keyring.open(ACME_1, "acme", sealed.data)
    )  # the user's codec ran first, inside
    assert inner.metadata["encoding"] == b"reversed"
    assert await bound.decode([sealed]) == [SECRET]


def in_activity(workflow_id: str) -> ActivityEnvironment:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, workflow_id=workflow_id)
    return env


async def test_blobs_are_sealed_per_tenant_and_hold_no_plaintext(tmp_path: Path) -> None:
    codec = PsychCodec(Keyring([ACME_1, GLOBEX_1], {"acme": "acme-1", "globex": "globex-1"}))
    store = EncryptedBlobStore(LocalBlobStore(tmp_path), codec.blob_cipher())
    data = SECRET.encode()

    acme_ref = await in_activity("psych-acme-r1").run(store.put, data)
    again = await in_activity("psych-acme-r2").run(store.put, data)
    globex_ref = await in_activity("psych-globex-r1").run(store.put, data)
    assert acme_ref == again  # one tenant's equal content keeps one blob
    assert acme_ref != globex_ref  # two tenants never share one
    assert await in_activity("psych-acme-r2").run(store.get, acme_ref) == data
    on_disk = [p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()]  # noqa: ASYNC240
    assert len(on_disk) == 2
    assert all(SECRET.encode() not in blob for blob in on_disk)
    # A Run of another tenant holding the ref learns nothing, not even that it exists.
    with pytest.raises(NotFound, match="no blob of tenant 'globex'"):
        await in_activity("psych-globex-r1").run(store.get, acme_ref)
    # A refusal names the blob (a BlobSealRefused, an AccessDenied); the cipher's reason is
    # its cause, for the operator.
    with pytest.raises(AccessDenied, match=f"blob {acme_ref} is in the blob store but") as out:
        await store.get(acme_ref)
    assert "outside a Run's activity" in str(out.value.__cause__)
    # A blob written before encryption was turned on is refused, not passed through.
    old = await LocalBlobStore(tmp_path).put(b"plain")
    with pytest.raises(BlobSealRefused) as plain:
        await in_activity("psych-acme-r1").run(store.get, old)
    assert plain.value.ref == old and plain.value.non_retryable
    assert "not encrypted" in str(plain.value.__cause__)
