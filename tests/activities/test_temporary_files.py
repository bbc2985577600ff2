"""The temporary files a writer killed mid-write leaves are swept by the next write that
goes through one, once they are an hour old; a younger one may be a live writer's."""

from __future__ import annotations

import os
import time
from pathlib import Path

from psych_runtime.activities import FileVersionStore, LocalBlobStore
from psych_runtime.activities.contract import blob_ref
from psych_runtime.activities.tokens import LocalTokenStore, TokenKey
from psych_runtime.specs import AgentBuilder


def left(directory: Path, name: str, *, hours_ago: float) -> Path:
    """A temporary file as a killed writer leaves it, last written ``hours_ago``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_bytes(b"half a rec")
    then = time.time() - hours_ago * 3600
    os.utime(path, (then, then))
    return path


def test_publishing_sweeps_a_killed_publishers_document(tmp_path: Path) -> None:
    stale = left(tmp_path, ".publish-abc.json", hours_ago=2)
    young = left(tmp_path, ".publish-def.json", hours_ago=0.1)
    FileVersionStore(tmp_path).publish(AgentBuilder("a").model("m").build())
    assert not stale.exists()
    assert young.exists()


async def test_a_token_write_sweeps_its_directory(tmp_path: Path) -> None:
    store = LocalTokenStore(tmp_path)
    key = TokenKey("acme", None, "https://auth.test", "psych", "https://crm.test/mcp")
    directory = (tmp_path / key.location()).parent
    stale = left(directory, ".put-0123456789abcdef", hours_ago=2)
    young = left(directory, ".put-fedcba9876543210", hours_ago=0.1)
    await store.put(key, b"record")
    assert await store.get(key) == b"record"
    assert not stale.exists()
    assert young.exists()


async def test_a_blob_rewritten_whole_sweeps_its_shard(tmp_path: Path) -> None:
    data = b"a blob a writer died writing" * 10
    digest = blob_ref(data).removeprefix("sha256:")
    shard = tmp_path / digest[:2]
    # The blob cut short by a killed writer, and that writer's temporary file of a rewrite.
    left(shard, digest[2:], hours_ago=2)
    stale = left(shard, ".put-killed-1", hours_ago=2)
    young = left(shard, ".put-running-1", hours_ago=0.1)
    store = LocalBlobStore(tmp_path, recent_bytes=0)
    assert await store.put(data) == blob_ref(data)
    assert await store.get(blob_ref(data)) == data
    assert not stale.exists()
    assert young.exists()
