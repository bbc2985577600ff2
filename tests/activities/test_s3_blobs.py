"""S3BlobStore's own behaviour (the shared contract is test_blob_contract.py): its URL,
the store ``PSYCH_BLOB_URL`` selects, conditional writes under concurrency, and errors that
are not a missing blob. Against moto's S3 server on loopback."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from psych_runtime.activities import (
    BlobNotFound,
    LocalBlobStore,
    S3BlobStore,
    S3Location,
    blob_ref,
    blob_store_from_env,
    parse_s3_url,
)
from psych_runtime.activities.blobs import blob_key
from psych_runtime.specs import SpecError
from psych_runtime.workers import WorkerSettings
from tests._s3_server import S3_ENV, S3Server, object_versions, s3_server


@pytest.fixture(scope="module")
async def s3() -> AsyncIterator[S3Server]:
    async with s3_server() as server:
        yield server


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in S3_ENV.items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize(
    ("url", "location"),
    [
        ("s3://bucket", S3Location(bucket="bucket")),
        ("s3://bucket/", S3Location(bucket="bucket")),
        ("s3://bucket/psych/blobs/", S3Location(bucket="bucket", prefix="psych/blobs/")),
        (
            "s3://b/p?endpoint=http://minio:9000&region=eu-west-1",
            S3Location(bucket="b", prefix="p/", endpoint="http://minio:9000", region="eu-west-1"),
        ),
        (
            "s3://b?addressing=virtual&endpoint=https://s3.example.test",
            S3Location(bucket="b", endpoint="https://s3.example.test", addressing="virtual"),
        ),
    ],
)
def test_the_url_names_bucket_prefix_endpoint_region_and_addressing(
    url: str, location: S3Location
) -> None:
    assert parse_s3_url(url) == location


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("file:///var/blobs", "not an s3:// URL"),
        ("s3:///prefix", "must be a bucket name"),
        ("s3://key:secret@bucket/p", "credentials do not go in the URL"),
        ("s3://bucket:9000/p", "must be a bucket name"),
        ("s3://b?endpoint=minio:9000", "is not an http(s) URL"),
        ("s3://b?region=a&region=b", "must be given once"),
        ("s3://b?region=", "must be given once"),
        ("s3://b?endpiont=http://x", "unknown parameter(s) endpiont"),
        ("s3://b?addressing=dns", "addressing must be path, virtual or auto"),
        ("s3://b/p#frag", "a fragment"),
    ],
)
def test_a_malformed_url_is_refused_naming_what_is_wrong(url: str, says: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_s3_url(url)
    assert says in str(caught.value)
    assert "PSYCH_BLOB_URL" in str(caught.value)


def test_psych_blob_url_selects_the_s3_store_and_the_directory_stays_the_default(
    tmp_path: Path,
) -> None:
    chosen = blob_store_from_env({"PSYCH_BLOB_URL": "s3://b/p?region=us-east-1"}, tmp_path)
    assert isinstance(chosen, S3BlobStore)
    assert chosen.location == S3Location(bucket="b", prefix="p/", region="us-east-1")
    default = blob_store_from_env({}, tmp_path / "home")
    assert isinstance(default, LocalBlobStore) and default.root == tmp_path / "home"
    chosen_dir = blob_store_from_env({"PSYCH_BLOB_DIR": str(tmp_path / "d")}, tmp_path)
    assert isinstance(chosen_dir, LocalBlobStore) and chosen_dir.root == tmp_path / "d"


def test_a_worker_reads_psych_blob_url_from_its_environment() -> None:
    settings = WorkerSettings.from_env({"PSYCH_BLOB_URL": "s3://fleet/blobs?region=eu-west-1"})
    assert isinstance(settings.blobs, S3BlobStore)
    assert settings.blobs.location.bucket == "fleet"
    assert isinstance(WorkerSettings.from_env({}).blobs, LocalBlobStore)


def test_both_stores_named_at_once_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="both set"):
        blob_store_from_env({"PSYCH_BLOB_URL": "s3://b", "PSYCH_BLOB_DIR": "/blobs"}, tmp_path)


@pytest.mark.usefixtures("aws_env")
async def test_concurrent_puts_of_one_blob_write_it_once(s3: S3Server) -> None:
    # Conditional writes: eight workers storing the same new blob leave one object
    # version in a versioned bucket, not eight.
    bucket = await s3.new_bucket(versioned=True)
    data = os.urandom(16 * 1024)
    stores = [S3BlobStore.from_url(s3.url(bucket, "p")) for _ in range(8)]
    try:
        refs = await asyncio.gather(*[store.put(data) for store in stores])
    finally:
        for store in stores:
            await store.aclose()
    assert set(refs) == {blob_ref(data)}
    digest = blob_ref(data).removeprefix("sha256:")
    versions = await object_versions(s3, bucket, f"p/{digest[:2]}/{digest[2:]}")
    assert len(versions) == 1


@pytest.mark.usefixtures("aws_env")
async def test_a_missing_bucket_is_a_configuration_error_not_a_missing_blob(
    s3: S3Server,
) -> None:
    async with S3BlobStore.from_url(s3.url("no-such-bucket-here")) as store:
        with pytest.raises(ClientError) as caught:
            await store.get(blob_ref(b"x"))
    assert not isinstance(caught.value, BlobNotFound)
    assert caught.value.response["Error"]["Code"] == "NoSuchBucket"


@pytest.mark.usefixtures("aws_env")
async def test_a_closed_store_opens_a_new_client_when_used_again(s3: S3Server) -> None:
    bucket = await s3.new_bucket(versioned=False)
    store = S3BlobStore.from_url(s3.url(bucket), recent_bytes=0)  # every get a request
    ref = await store.put(b"before")
    await store.aclose()
    try:
        assert await store.get(ref) == b"before"
    finally:
        await store.aclose()
    assert repr(store) == f"S3BlobStore(s3://{bucket}/ at {s3.endpoint})"


@pytest.mark.usefixtures("aws_env")
async def test_a_store_reads_back_what_it_wrote_or_read_last_without_a_request(
    s3: S3Server,
) -> None:
    # Shown by deleting the object behind the stores' backs: the ones that wrote or read
    # it still answer; one that never saw it, or keeps nothing, finds it missing.
    bucket = await s3.new_bucket(versioned=False)
    url = s3.url(bucket, "p")
    async with (
        S3BlobStore.from_url(url) as writer,
        S3BlobStore.from_url(url) as reader,
        S3BlobStore.from_url(url) as stranger,
        S3BlobStore.from_url(url, recent_bytes=0) as keeps_nothing,
    ):
        ref = await writer.put(b"kept")
        assert await reader.get(ref) == b"kept"
        async with s3.client() as client:
            await client.delete_object(Bucket=bucket, Key="p/" + blob_key(ref))
        assert await writer.get(ref) == b"kept"
        assert await reader.get(ref) == b"kept"
        for store in (stranger, keeps_nothing):
            with pytest.raises(BlobNotFound, match="no blob"):
                await store.get(ref)


@pytest.mark.usefixtures("aws_env")
async def test_an_object_changed_behind_the_store_is_refused_not_served(s3: S3Server) -> None:
    bucket = await s3.new_bucket(versioned=False)
    url = s3.url(bucket, "p")
    async with S3BlobStore.from_url(url) as writer:
        ref = await writer.put(b'{"whole": "message"}')
    async with s3.client() as client:
        await client.put_object(Bucket=bucket, Key="p/" + blob_key(ref), Body=b'{"whole": "mes')
    async with S3BlobStore.from_url(url) as reader:
        for _ in range(2):  # nor kept as whole for the next read
            with pytest.raises(
                BlobNotFound, match="is damaged: its bytes hash otherwise"
            ) as caught:
                await reader.get(ref)
            assert caught.value.damaged


@pytest.mark.usefixtures("aws_env")
async def test_a_put_of_a_damaged_objects_data_mends_it(s3: S3Server) -> None:
    # As LocalBlobStore mends a torn file: an object that does not hash to its key (a torn
    # local store synced into the bucket, a writer outside psych) is written whole by the
    # next put of its data, instead of the put trusting the key's presence (412).
    bucket = await s3.new_bucket(versioned=False)
    url = s3.url(bucket, "p")
    data = b'{"whole": "message"}'
    ref = blob_ref(data)
    async with s3.client() as client:
        await client.put_object(Bucket=bucket, Key="p/" + blob_key(ref), Body=data[:7])
    async with S3BlobStore.from_url(url) as store:
        with pytest.raises(BlobNotFound, match="is damaged"):
            await store.get(ref)
        assert await store.put(data) == ref
    async with S3BlobStore.from_url(url, recent_bytes=0) as reader:
        assert await reader.get(ref) == data


def test_a_blob_dir_that_is_a_file_is_refused_when_the_worker_starts(tmp_path: Path) -> None:
    # Not at the first Run, whose every activity would fail on it ("Not a directory").
    taken = tmp_path / "blobs"
    taken.write_text("not a directory")
    with pytest.raises(SpecError) as caught:
        WorkerSettings.from_env({"PSYCH_BLOB_DIR": str(taken)})
    assert str(caught.value) == (
        f"PSYCH_BLOB_DIR {str(taken)!r} is a file, not a directory: name a directory (made "
        "when first written to), or a bucket with PSYCH_BLOB_URL"
    )
    with pytest.raises(SpecError, match=r"^the blob directory '.*' is a file"):
        blob_store_from_env({}, taken)


def test_a_blob_dir_the_worker_cannot_write_is_refused_when_it_starts(tmp_path: Path) -> None:
    locked = tmp_path / "blobs"
    locked.mkdir()
    # Root passes permission bits: an immutable directory refuses even root its writes.
    lock = ["chattr", "+i"] if os.geteuid() == 0 else ["chmod", "0555"]
    unlock = ["chattr", "-i"] if os.geteuid() == 0 else ["chmod", "0755"]
    subprocess.run([*lock, str(locked)], check=True)
    try:
        with pytest.raises(SpecError) as caught:
            WorkerSettings.from_env({"PSYCH_BLOB_DIR": str(locked)})
        # Not made beneath it either, on the first write.
        with pytest.raises(SpecError, match=r"does not let this user make it"):
            blob_store_from_env({"PSYCH_BLOB_DIR": str(locked / "deeper" / "blobs")}, locked)
    finally:
        subprocess.run([*unlock, str(locked)], check=True)
    assert str(caught.value).startswith(
        f"PSYCH_BLOB_DIR {str(locked)!r} cannot be written to (Operation not permitted"
        if os.geteuid() == 0
        else f"PSYCH_BLOB_DIR {str(locked)!r} cannot be written to (Permission denied"
    )
    assert list(locked.iterdir()) == []  # the probe left nothing behind
    assert isinstance(blob_store_from_env({"PSYCH_BLOB_DIR": str(locked)}, locked), LocalBlobStore)
