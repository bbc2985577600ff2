"""The TokenStore port, run against every shipped store (a directory and an S3-compatible
bucket on loopback), its encrypting wrapper with the payload codec's keys, and the store a
worker's environment selects."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import os
import stat
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from psych_runtime.activities import (
    EncryptedTokenStore,
    LocalTokenStore,
    S3TokenStore,
    TokenKey,
    TokenStore,
    token_store_from_env,
)
from psych_runtime.activities.tokens import TenantSealedTokens, unsealed
from psych_runtime.specs import AccessDenied, SpecError
from psych_runtime.workers import Key, Keyring, PsychCodec
from tests._s3_server import S3_ENV, S3Server, s3_server

KEY = TokenKey("acme", "alice", "https://auth.example.test", "client-1", "https://mcp.test/mcp")


@dataclass
class Medium:
    store: TokenStore
    raw: Callable[[TokenKey], Awaitable[bytes | None]]
    """The bytes the medium holds for a key, read behind the store's back."""


@pytest.fixture(scope="module")
async def s3() -> AsyncIterator[S3Server]:
    async with s3_server() as server:
        yield server


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in S3_ENV.items():
        monkeypatch.setenv(name, value)


def _local(tmp_path: Path) -> Medium:
    root = tmp_path / "tokens"

    async def raw(key: TokenKey) -> bytes | None:
        path = root / key.location()
        return path.read_bytes() if path.exists() else None

    return Medium(LocalTokenStore(root), raw)


async def _s3(server: S3Server) -> Medium:
    bucket = await server.new_bucket(versioned=False)
    store = S3TokenStore.from_url(server.url(bucket, "fleet"))

    async def raw(key: TokenKey) -> bytes | None:
        async with server.client() as client:
            listed = await client.list_objects_v2(Bucket=bucket)
            names = [item["Key"] for item in listed.get("Contents", [])]
            if store.object_key(key) not in names:
                return None
            response = await client.get_object(Bucket=bucket, Key=store.object_key(key))
            async with response["Body"] as body:
                return await body.read()

    return Medium(store, raw)


@pytest.fixture(params=["local", "s3"])
async def medium(
    request: pytest.FixtureRequest, tmp_path: Path, aws_env: None, s3: S3Server
) -> AsyncIterator[Medium]:
    if request.param == "local":
        yield _local(tmp_path)
        return
    made = await _s3(s3)
    try:
        yield made
    finally:
        assert isinstance(made.store, S3TokenStore)
        await made.store.aclose()


async def test_a_record_is_stored_replaced_and_deleted(medium: Medium) -> None:
    store = medium.store
    assert isinstance(store, TokenStore)
    assert await store.get(KEY) is None
    await store.put(KEY, b"first")
    assert await store.get(KEY) == b"first"
    await store.put(KEY, b"second")
    assert await store.get(KEY) == b"second"
    assert await medium.raw(KEY) == b"second"
    await store.delete(KEY)
    assert await store.get(KEY) is None
    assert await medium.raw(KEY) is None
    await store.delete(KEY)  # deleting what is not there is no error


async def test_an_update_creates_changes_leaves_and_deletes_a_record(medium: Medium) -> None:
    store = medium.store
    seen: list[bytes | None] = []

    def append(suffix: bytes) -> Callable[[bytes | None], bytes | None]:
        def change(record: bytes | None) -> bytes | None:
            seen.append(record)
            return (record or b"") + suffix

        return change

    await store.update(KEY, append(b"a"))
    await store.update(KEY, append(b"b"))
    assert seen == [None, b"a"]
    assert await medium.raw(KEY) == b"ab"
    await store.update(KEY, lambda record: record)  # the same bytes: nothing written
    assert await store.get(KEY) == b"ab"

    def refuse(record: bytes | None) -> bytes | None:
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        await store.update(KEY, refuse)
    assert await store.get(KEY) == b"ab"
    await store.update(KEY, lambda record: None)
    assert await medium.raw(KEY) is None
    await store.update(KEY, lambda record: None)  # nothing there, nothing to delete


async def test_a_sealed_update_changes_the_opened_record(tmp_path: Path) -> None:
    plain = LocalTokenStore(tmp_path / "tokens")
    codec = PsychCodec(Keyring([ACME, GLOBEX], {"acme": "acme-1", "globex": "globex-1"}))
    store = TenantSealedTokens(plain, codec.blob_cipher())
    await store.update(KEY, lambda record: b"secret-1234567890")
    await store.update(KEY, lambda record: (record or b"") + b"+more")
    assert await store.get(KEY) == b"secret-1234567890+more"
    on_disk = await plain.get(KEY)
    assert on_disk is not None and b"secret" not in on_disk
    await store.update(KEY, lambda record: record)
    assert await plain.get(KEY) == on_disk  # unchanged: not sealed again
    await store.update(KEY, lambda record: None)
    assert await plain.get(KEY) is None


@pytest.mark.parametrize("field", ["tenant", "principal", "issuer", "client_id", "resource"])
async def test_a_record_is_seen_only_under_its_whole_key(medium: Medium, field: str) -> None:
    """Another issuer (or tenant, principal, client, resource) never finds the record."""
    value: str | None = None if field == "principal" else "other"
    other = dataclasses.replace(KEY, **{field: value})  # type: ignore[arg-type]  # per field
    await medium.store.put(KEY, b"acme's token")
    assert await medium.store.get(other) is None
    await medium.store.put(other, b"the other's token")
    assert await medium.store.get(KEY) == b"acme's token"
    assert await medium.store.get(other) == b"the other's token"


def _files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


async def test_key_fields_never_name_a_path(tmp_path: Path) -> None:
    root = tmp_path / "tokens"
    store = LocalTokenStore(root)
    sneaky = TokenKey("../../etc", None, "/", "../client", "x")
    await store.put(sneaky, b"record")
    files = _files(tmp_path)
    shard = (root / sneaky.location()).parent
    assert sorted(files) == sorted([shard / ".lock", root / sneaky.location()])  # + its lock
    assert len(sneaky.location()) == 65
    mode = stat.S_IMODE((root / sneaky.location()).stat().st_mode)
    assert mode == 0o600, oct(mode)


async def test_s3_records_live_under_the_prefix_tokens_folder(s3: S3Server, aws_env: None) -> None:
    bucket = await s3.new_bucket(versioned=False)
    store = S3TokenStore.from_url(s3.url(bucket, "fleet/blobs"))
    try:
        await store.put(KEY, b"record")
        async with s3.client() as client:
            listed = await client.list_objects_v2(Bucket=bucket)
        names = [item["Key"] for item in listed.get("Contents", [])]
        assert names == [f"fleet/blobs/tokens/{KEY.location()}"]
    finally:
        await store.aclose()


ACME = Key("acme-1", "acme", os.urandom(32))
GLOBEX = Key("globex-1", "globex", os.urandom(32))


def _in_run_of(tenant: str) -> ActivityEnvironment:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, workflow_id=f"psych-{tenant}-r1")
    return env


async def test_encrypted_records_are_sealed_for_the_running_tenant(tmp_path: Path) -> None:
    plain = LocalTokenStore(tmp_path / "tokens")
    codec = PsychCodec(Keyring([ACME, GLOBEX], {"acme": "acme-1", "globex": "globex-1"}))
    store = EncryptedTokenStore(plain, codec.blob_cipher())
    record = b'{"access_token": "tok-acme-1234567890"}'

    async def put() -> None:
        await store.put(KEY, record)

    async def get() -> bytes | None:
        return await store.get(KEY)

    await _in_run_of("acme").run(put)
    on_disk = await plain.get(KEY)
    assert on_disk is not None
    assert b"tok-acme" not in on_disk
    assert await _in_run_of("acme").run(get) == record
    # Another tenant's Run reading the same record finds nothing it can open.
    assert await _in_run_of("globex").run(get) is None

    await plain.put(KEY, on_disk[:-1] + bytes([on_disk[-1] ^ 1]))
    with pytest.raises(AccessDenied):
        await _in_run_of("acme").run(get)
    await plain.put(KEY, record)  # stored in clear behind the wrapper's back
    with pytest.raises(AccessDenied, match="not encrypted"):
        await _in_run_of("acme").run(get)


async def test_records_sealed_for_the_key_tenant_outside_a_run(tmp_path: Path) -> None:
    # psych serve acts for a tenant outside any Run; a Run's sealing refuses that.
    plain = LocalTokenStore(tmp_path / "tokens")
    codec = PsychCodec(Keyring([ACME, GLOBEX], {"acme": "acme-1", "globex": "globex-1"}))
    store = TenantSealedTokens(plain, codec.blob_cipher())
    record = b'{"token": "webhook-secret-1234567890"}'
    await store.put(KEY, record)
    on_disk = await plain.get(KEY)
    assert on_disk is not None and b"webhook-secret" not in on_disk
    assert await store.get(KEY) == record
    # The same bytes a Run of the tenant seals: either side opens the other's.
    in_run = EncryptedTokenStore(plain, codec.blob_cipher())

    async def get_in_run() -> bytes | None:
        return await in_run.get(KEY)

    assert await _in_run_of("acme").run(get_in_run) == record
    # A record under another tenant's key that holds acme's sealing opens for no one.
    globex_key = dataclasses.replace(KEY, tenant="globex")
    await plain.put(globex_key, on_disk)
    assert await store.get(globex_key) is None
    assert unsealed(store) is plain and unsealed(in_run) is plain and unsealed(plain) is plain


def test_the_environment_selects_the_store(tmp_path: Path) -> None:
    default = token_store_from_env({}, tmp_path / "default")
    assert isinstance(default, LocalTokenStore)
    assert default.root == tmp_path / "default"
    chosen = token_store_from_env({"PSYCH_TOKEN_DIR": str(tmp_path / "t")}, tmp_path)
    assert isinstance(chosen, LocalTokenStore)
    assert chosen.root == tmp_path / "t"
    fleet = token_store_from_env({"PSYCH_BLOB_URL": "s3://bucket/p?region=eu-west-1"}, tmp_path)
    assert isinstance(fleet, S3TokenStore)
    assert fleet.object_key(KEY) == f"p/tokens/{KEY.location()}"
    with pytest.raises(SpecError, match="PSYCH_TOKEN_DIR"):
        token_store_from_env({"PSYCH_BLOB_URL": "s3://b", "PSYCH_TOKEN_DIR": "x"}, tmp_path)
    with pytest.raises(SpecError, match="s3://"):
        token_store_from_env({"PSYCH_BLOB_URL": "http://b"}, tmp_path)


@pytest.mark.parametrize("write", ["put", "delete"])
async def test_a_put_or_delete_waits_for_an_update_of_its_shard(tmp_path: Path, write: str) -> None:
    # From an audit: a put (or delete) landing between an update's read and its write was
    # lost under it (the update wrote what it had read, changed).
    store = LocalTokenStore(tmp_path / "tokens")
    await store.put(KEY, b"first")
    loop = asyncio.get_running_loop()
    started: list[concurrent.futures.Future[None]] = []

    def change(record: bytes | None) -> bytes | None:
        # In the update's thread, holding the lock: the other write starts and gets as far
        # as it can within a second (all the way, were it not held back).
        other = store.put(KEY, b"put") if write == "put" else store.delete(KEY)
        started.append(asyncio.run_coroutine_threadsafe(other, loop))
        with contextlib.suppress(concurrent.futures.TimeoutError):
            started[0].result(timeout=1)
        return (record or b"") + b"+updated"

    await store.update(KEY, change)
    await asyncio.wrap_future(started[0])
    assert await store.get(KEY) == (b"put" if write == "put" else None)
