"""The file-backed VersionStore: idempotent publishing, verified reads."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import pytest

from psych_runtime.activities import FileVersionStore
from psych_runtime.specs import (
    AgentBuilder,
    AgentSpec,
    NotFound,
    SpecError,
    StoreDamaged,
    VersionStore,
    version_hash,
)


def spec(name: str = "support") -> AgentSpec:
    return AgentBuilder(name).instructions("Help.").model("gpt-4o").build()


def test_it_is_a_version_store(tmp_path: Path) -> None:
    assert isinstance(FileVersionStore(tmp_path), VersionStore)


def test_publishing_an_identical_spec_returns_the_first_version(tmp_path: Path) -> None:
    store = FileVersionStore(tmp_path)
    first = store.publish(spec())
    time.sleep(0.01)
    again = store.publish(spec())
    assert again == first
    assert again.published_at == first.published_at
    assert first.hash == version_hash(spec())
    assert store.get(first.hash) == first
    assert store.publish(spec("other")).hash != first.hash


def test_concurrent_publishers_agree_on_one_version(tmp_path: Path) -> None:
    store = FileVersionStore(tmp_path)
    with ThreadPoolExecutor(8) as pool:
        versions = list(pool.map(lambda _: store.publish(spec()), range(16)))
    assert len({v.published_at for v in versions}) == 1
    assert [p.name for p in tmp_path.iterdir()] == [f"{versions[0].hash[7:]}.json"]


def test_unknown_hash_is_not_found_and_a_malformed_one_is_refused(tmp_path: Path) -> None:
    store = FileVersionStore(tmp_path)
    with pytest.raises(NotFound):
        store.get("sha256:" + "0" * 64)
    with pytest.raises(SpecError, match="not a Version hash"):
        store.get("md5:abc")
    # 64 letters or upper-case hex: no Version is ever stored under them, so not "no Version".
    for malformed in ("sha256:" + "z" * 64, "sha256:" + "AB" * 32):
        with pytest.raises(SpecError, match=r"not a Version hash.*64 lowercase hex"):
            store.get(malformed)


def test_a_tampered_file_is_refused_on_read(tmp_path: Path) -> None:
    store = FileVersionStore(tmp_path)
    version = store.publish(spec())
    path = tmp_path / f"{version.hash[7:]}.json"
    data = json.loads(path.read_text())
    data["spec"]["instructions"] = "Do something else."
    path.write_text(json.dumps(data))
    with pytest.raises(StoreDamaged, match=f"the stored Version {version.hash} is damaged"):
        store.get(version.hash)
    # Publishing the Spec again writes it anew, in place of the damaged file.
    assert store.publish(spec()).hash == version.hash
    assert store.get(version.hash).spec == version.spec


def test_a_cut_short_file_names_the_hash_not_the_path_and_publishing_mends_it(
    tmp_path: Path,
) -> None:
    store = FileVersionStore(tmp_path)
    version = store.publish(spec())
    path = tmp_path / f"{version.hash[7:]}.json"
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(StoreDamaged) as raised:
        store.get(version.hash)
    assert str(tmp_path) not in str(raised.value)
    assert store.publish(spec()) == store.get(version.hash)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left


def test_a_mended_version_keeps_the_time_it_was_first_published(tmp_path: Path) -> None:
    # The newest Version of a name is the one an A2A agent serves: a repair must not make
    # an older Version the newest.
    store = FileVersionStore(tmp_path)
    first = store.publish(spec())
    path = tmp_path / f"{first.hash[7:]}.json"
    document = path.read_bytes()
    path.write_bytes(document[: document.index(b'"spec"')])  # published_at still legible
    assert store.publish(spec()).published_at == first.published_at
    path.write_bytes(b"{")  # nothing legible: when the store wrote the file
    written = datetime.fromtimestamp(path.stat().st_mtime, UTC)
    assert store.publish(spec()).published_at == written == store.get(first.hash).published_at


def test_a_published_at_without_a_time_zone_is_damage_and_publishing_mends_it(
    tmp_path: Path,
) -> None:
    # psych writes published_at in UTC with its offset; a document without one (written by
    # hand or by another tool) is not compared with the others' times (which is the
    # newest of a name?), it is refused naming the field, and mended like other damage.
    store = FileVersionStore(tmp_path)
    version = store.publish(spec())
    path = tmp_path / f"{version.hash[7:]}.json"
    data = json.loads(path.read_text())
    data["published_at"] = "2026-12-06T10:00:00"
    path.write_text(json.dumps(data))
    with pytest.raises(StoreDamaged) as raised:
        store.get(version.hash)
    assert str(raised.value) == (
        f"the stored Version {version.hash} is damaged: its published_at "
        "'2026-12-06T10:00:00' has no time zone"
    )
    mended = store.publish(spec())
    assert mended.published_at.tzinfo is not None
    assert store.get(version.hash) == mended
