"""The BlobStore contract, run against every shipped store: LocalBlobStore and S3BlobStore.

Each store comes with a probe that looks behind its back at the medium (the file, or the
object's versions in a versioned bucket on a loopback S3 server), so "a put of an
existing ref does not rewrite it" is observed, not assumed.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from temporalio.api.failure.v1 import Failure
from temporalio.converter import DataConverter

from psych_runtime.activities import (
    BlobNotFound,
    BlobStore,
    ChatMessage,
    Conversations,
    LocalBlobStore,
    S3BlobStore,
    blob_ref,
)
from psych_runtime.activities.contract import ErrorType
from psych_runtime.specs import NotFound
from tests._s3_server import S3_ENV, S3Server, object_versions, s3_server

Stamp = Callable[[str], Awaitable[object]]
"""What the medium holds under a relative key ``aa/bb...``: changes when it is rewritten."""


@dataclass
class Store:
    store: BlobStore
    stamp: Stamp
    raw: Callable[[str], Awaitable[bytes]]
    """The bytes under a relative key, read from the medium directly."""


@pytest.fixture(scope="module")
async def s3() -> AsyncIterator[S3Server]:
    async with s3_server() as server:
        yield server


def _local(tmp_path: Path) -> Store:
    root = tmp_path / "blobs"

    async def stamp(key: str) -> object:
        info = (root / key).stat()
        return (info.st_ino, info.st_mtime_ns)

    async def raw(key: str) -> bytes:
        return (root / key).read_bytes()

    return Store(LocalBlobStore(root), stamp, raw)


async def _s3(server: S3Server) -> Store:
    bucket = await server.new_bucket(versioned=True)
    prefix = "fleet/blobs/"

    async def stamp(key: str) -> object:
        return [v["VersionId"] for v in await object_versions(server, bucket, prefix + key)]

    async def raw(key: str) -> bytes:
        async with server.client() as client:
            response = await client.get_object(Bucket=bucket, Key=prefix + key)
            async with response["Body"] as body:
                return await body.read()

    return Store(S3BlobStore.from_url(server.url(bucket, prefix)), stamp, raw)


@pytest.fixture(params=["local", "s3"])
async def store(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    s3: S3Server,
) -> AsyncIterator[Store]:
    if request.param == "local":
        yield _local(tmp_path)
        return
    for name, value in S3_ENV.items():
        monkeypatch.setenv(name, value)
    made = await _s3(s3)
    assert isinstance(made.store, S3BlobStore)
    try:
        yield made
    finally:
        await made.store.aclose()


def _key(ref: str) -> str:
    digest = ref.removeprefix("sha256:")
    return f"{digest[:2]}/{digest[2:]}"


@pytest.mark.parametrize(
    "data",
    [b"hello", b"", bytes(range(256)) * 4, os.urandom(1 << 20)],
    ids=["text", "empty", "binary", "1MiB"],
)
async def test_put_returns_the_content_hash_and_get_returns_the_bytes(
    store: Store, data: bytes
) -> None:
    ref = await store.store.put(data)
    assert ref == blob_ref(data)
    assert await store.store.get(ref) == data


async def test_blobs_lie_under_the_same_relative_key_in_every_store(store: Store) -> None:
    # So a LocalBlobStore directory synced into a bucket prefix is a valid S3 store.
    ref = await store.store.put(b"layout")
    assert await store.raw(_key(ref)) == b"layout"


async def test_a_put_of_an_existing_ref_neither_fails_nor_rewrites_it(store: Store) -> None:
    ref = await store.store.put(b"once")
    before = await store.stamp(_key(ref))
    assert await store.store.put(b"once") == ref
    assert await store.store.put(b"once") == ref
    assert await store.stamp(_key(ref)) == before
    assert await store.store.get(ref) == b"once"


async def test_concurrent_puts_of_one_new_blob_all_succeed(store: Store) -> None:
    data = os.urandom(64 * 1024)
    refs = await asyncio.gather(*[store.store.put(data) for _ in range(8)])
    assert set(refs) == {blob_ref(data)}
    assert await store.store.get(refs[0]) == data


async def test_a_missing_blob_is_a_typed_non_retryable_error_naming_the_digest(
    store: Store,
) -> None:
    ref = blob_ref(b"never stored")
    with pytest.raises(BlobNotFound) as caught:
        await store.store.get(ref)
    err = caught.value
    assert isinstance(err, NotFound)  # the port's contract: callers catch NotFound
    assert err.ref == ref
    assert ref in str(err)
    assert not err.damaged  # missing, not damaged: read_tool_output tells them apart
    # What Temporal records when it escapes an activity: a non-retryable failure of type
    # BlobNotFound, so the activity is not retried until its timeout.
    failure = Failure()
    DataConverter.default.failure_converter.to_failure(
        err, DataConverter.default.payload_converter, failure
    )
    assert failure.application_failure_info.type == ErrorType.BLOB_NOT_FOUND
    assert failure.application_failure_info.non_retryable
    assert ref in failure.message


@pytest.mark.parametrize(
    "ref",
    ["sha256:" + "A" * 64, "sha256:" + "a" * 63, "md5:" + "a" * 64, "sha256:../" + "a" * 61],
)
async def test_a_ref_that_is_not_a_sha256_digest_is_refused(store: Store, ref: str) -> None:
    with pytest.raises(BlobNotFound, match="not a blob ref"):
        await store.store.get(ref)


async def test_a_conversation_chain_round_trips_through_the_store(store: Store) -> None:
    conversations = Conversations(store.store)
    first = await conversations.put_message(ChatMessage(role="user", content="Refund order 42"))
    head = await conversations.append(None, [first])
    second = await conversations.put_message(ChatMessage(role="assistant", content="Done."))
    head = await conversations.append(head, [second])
    assert head is not None
    # A fresh reader (another worker) has no cache: it walks the chain in the store.
    messages = await Conversations(store.store).messages(head)
    assert [m.content for m in messages] == ["Refund order 42", "Done."]
    node = json.loads(await store.store.get(head))
    assert node["messages"] == [second]
