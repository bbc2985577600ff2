"""The VersionStore in an S3-compatible bucket (a loopback moto server): what a fleet's
workers publish (a spawned child's Version) every other worker and client reads, and the
store ``PSYCH_STORE`` selects for workers and ``psych`` commands (issue 26, item 2)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from psych_runtime.activities import FileVersionStore, S3VersionStore
from psych_runtime.activities.contract import VersionPublishInput
from psych_runtime.activities.versions import VersionActivities, version_store_at
from psych_runtime.specs import (
    AgentBuilder,
    AgentSpec,
    NotFound,
    SpecError,
    StoreDamaged,
    VersionStore,
    version_hash,
)
from psych_runtime.workers import WorkerSettings
from psych_runtime.workers.cli import main
from tests._s3_server import S3_ENV, S3Server, s3_server


@pytest.fixture(scope="module")
async def s3() -> AsyncIterator[S3Server]:
    async with s3_server() as server:
        yield server


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in S3_ENV.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
async def url(s3: S3Server) -> str:
    return s3.url(await s3.new_bucket(), "fleet")


@pytest.fixture
def stores(url: str) -> Iterator[tuple[S3VersionStore, S3VersionStore]]:
    """Two stores of one bucket: two processes of a fleet."""
    one, two = S3VersionStore.from_url(url), S3VersionStore.from_url(url)
    yield one, two
    one.close()
    two.close()


def spec(name: str = "researcher") -> AgentSpec:
    return AgentBuilder(name).instructions("Look it up.").model("gpt-4o").build()


def test_a_version_one_process_publishes_another_reads(
    stores: tuple[S3VersionStore, S3VersionStore],
) -> None:
    one, two = stores
    assert isinstance(one, VersionStore)
    published = one.publish(spec())
    assert published.hash == version_hash(spec())
    assert two.get(published.hash) == published
    time.sleep(0.01)
    # Idempotent across processes: the first publisher's Version (and its time) wins.
    again = two.publish(spec())
    assert again == published
    assert again.published_at == published.published_at
    assert two.hashes() == [published.hash]


async def test_the_object_sits_under_versions_in_the_prefix(
    s3: S3Server, stores: tuple[S3VersionStore, S3VersionStore]
) -> None:
    one, _ = stores
    published = one.publish(spec("lead"))
    digest = published.hash.removeprefix("sha256:")
    assert one.object_key(published.hash) == f"fleet/versions/{digest}.json"
    async with s3.client() as raw:
        listed = await raw.list_objects_v2(Bucket=one.location.bucket, Prefix="fleet/")
    assert [item["Key"] for item in listed["Contents"]] == [f"fleet/versions/{digest}.json"]


def test_unknown_and_malformed_hashes(stores: tuple[S3VersionStore, S3VersionStore]) -> None:
    one, _ = stores
    missing = "sha256:" + "0" * 64
    with pytest.raises(NotFound, match=missing):
        one.get(missing)
    with pytest.raises(SpecError, match="not a Version hash"):
        one.get("md5:abc")
    with pytest.raises(SpecError, match="not a Version hash"):
        one.get("sha256:" + "z" * 64)


async def test_the_publish_activity_stores_a_spawned_spec_in_the_bucket(
    stores: tuple[S3VersionStore, S3VersionStore],
) -> None:
    one, two = stores
    activities = VersionActivities(one)
    version = await ActivityEnvironment().run(
        activities.publish, VersionPublishInput(run_id="r1", spec=spec("child"))
    )
    assert two.get(version.hash) == version


def test_psych_store_selects_the_bucket_for_workers_and_commands(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = WorkerSettings.from_env({"PSYCH_STORE": url})
    assert isinstance(settings.versions, S3VersionStore)
    assert settings.versions.location.prefix == "fleet/"
    assert isinstance(version_store_at(tmp_path), FileVersionStore)
    # `psych publish` with PSYCH_STORE naming the bucket publishes there, not to a directory.
    path = tmp_path / "agent.yaml"
    path.write_text("kind: agent\nname: notes\ninstructions: Take notes.\nmodel: {model: gpt-4o}\n")
    monkeypatch.setenv("PSYCH_STORE", url)
    monkeypatch.chdir(tmp_path)
    assert main(["publish", str(path)]) == 0
    published = capsys.readouterr().out.split()[0]
    assert S3VersionStore.from_url(url).get(published).spec.name == "notes"
    assert not (tmp_path / ".psych").exists()


def test_a_store_url_is_read_whatever_its_case_and_spaces(url: str, tmp_path: Path) -> None:
    for given in (url.replace("s3://", "S3://"), f"  {url} "):
        store = version_store_at(given)
        assert isinstance(store, S3VersionStore) and store.location.prefix == "fleet/"


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("", "is empty"),
        ("  ", "is empty"),
        ("https://bucket.example/psych", "a https:// URL is not a store"),
        ("file:///srv/psych", "a file:// URL is not a store"),
        ("s3:bucket", "must be a bucket name"),  # not a directory named 's3:bucket'
        ("S3:/bucket", "must be a bucket name"),
    ],
)
def test_a_store_that_is_no_directory_nor_s3_url_is_refused(given: str, said: str) -> None:
    # Read as a directory, each of these published into the working directory silently.
    with pytest.raises(SpecError, match=f"PSYCH_STORE.*{said}"):
        version_store_at(given)


def test_a_malformed_store_url_names_psych_store() -> None:
    with pytest.raises(SpecError, match=r"PSYCH_STORE='s3://b\?nope=1': unknown parameter"):
        version_store_at("s3://b?nope=1")


def test_a_publish_that_meets_a_write_under_way_tries_again(
    stores: tuple[S3VersionStore, S3VersionStore],
) -> None:
    # S3 answers 409 while another conditional write of the key is under way; that write
    # may yet fail, so the publish writes again instead of reading a Version not there.
    from botocore.exceptions import ClientError

    one, _ = stores
    real = one._s3()
    conflicts = [2]

    class Conflicting:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def put_object(self, **kwargs: Any) -> Any:
            if conflicts[0]:
                conflicts[0] -= 1
                raise ClientError(
                    {
                        "Error": {"Code": "ConditionalRequestConflict", "Message": "busy"},
                        "ResponseMetadata": {
                            "HTTPStatusCode": 409,
                            "HTTPHeaders": {},
                            "HostId": "",
                            "RequestId": "",
                            "RetryAttempts": 0,
                        },
                    },
                    "PutObject",
                )
            return real.put_object(**kwargs)

    one._client = Conflicting()
    published = one.publish(spec("conflicted"))
    assert conflicts == [0]
    assert one.get(published.hash) == published


def test_a_damaged_object_is_refused_and_publishing_mends_it_keeping_its_time(
    stores: tuple[S3VersionStore, S3VersionStore],
) -> None:
    one, two = stores
    first = one.publish(spec())
    key = one.object_key(first.hash)
    document = first.to_json().encode()
    one._s3().put_object(
        Bucket=one.location.bucket, Key=key, Body=document[: document.index(b'"spec"')]
    )
    with pytest.raises(StoreDamaged, match=f"the stored Version {first.hash} is damaged"):
        two.get(first.hash)
    assert two.publish(spec()) == first  # the same Spec, the same first published_at
    assert one.get(first.hash) == first
