"""Push configurations and the watched index changed by several ``psych serve``
processes at once over one shared store (a directory, the same sealed for the tenant, a
bucket on loopback): every process's change lands (``TokenStore.update``).

Each writer is a process of its own (``_push_writers.py``), as the fleet's are: a lock
inside one process cannot keep them apart.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from psych_runtime.activities.tokens import (
    LocalTokenStore,
    S3TokenStore,
    TenantSealedTokens,
    TokenStore,
)
from psych_runtime.workers import Key, Keyring, PsychCodec
from psych_runtime.workers.serve.a2a import PushStore
from tests._s3_server import S3_ENV, S3Server, s3_server
from tests.forking import aio

pytestmark = pytest.mark.long

# Four writers of 8 changes each still interleave many times over (each change holds the
# shard's lock across a read, a seal and two fsyncs); 15 each took most of a minute sealed.
PROCESSES = 4
CHANGES = 8
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
async def s3() -> AsyncIterator[S3Server]:
    async with s3_server() as server:
        yield server


async def _race(medium: str, where: str, tmp_path: Path, env: dict[str, str]) -> None:
    """Run the writers at once (forked from the fork host, ``tests.forking``); each must
    exit 0."""
    go = tmp_path / "go"
    writers = [
        await aio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.serve._push_writers",
            medium,
            where,
            f"p{n}",
            str(CHANGES),
            str(go),
            cwd=ROOT,
            env={**os.environ, **env},
            stderr=aio.PIPE,
        )
        for n in range(PROCESSES)
    ]
    await asyncio.sleep(1.0)  # they start (and, executed, import) before the gun
    go.touch()
    for writer in writers:
        _, err = await asyncio.wait_for(writer.communicate(), timeout=120)
        assert writer.returncode == 0, err.decode()


def _expected() -> list[str]:
    return sorted(f"p{n}-{i}" for n in range(PROCESSES) for i in range(CHANGES))


async def _check(tokens: TokenStore) -> None:
    store = PushStore(tokens)
    assert sorted(await store.configs("acme", "run-1")) == _expected()
    assert sorted(w.workflow_id for w in await store.watched()) == _expected()


@pytest.mark.parametrize("medium", ["local", "sealed"])
async def test_processes_sharing_a_directory_lose_no_change(medium: str, tmp_path: Path) -> None:
    key = os.urandom(32)
    root = tmp_path / "tokens"
    await _race(medium, str(root), tmp_path, {"PSYCH_TEST_KEY": key.hex()})
    tokens: TokenStore = LocalTokenStore(root)
    if medium == "sealed":
        codec = PsychCodec(Keyring([Key("acme-1", "acme", key)], {"acme": "acme-1"}))
        tokens = TenantSealedTokens(tokens, codec.blob_cipher())
    await _check(tokens)


async def test_processes_sharing_a_bucket_lose_no_change(
    s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in S3_ENV.items():
        monkeypatch.setenv(name, value)
    url = s3.url(await s3.new_bucket(versioned=False), "fleet")
    await _race("s3", url, tmp_path, S3_ENV)
    tokens = S3TokenStore.from_url(url)
    try:
        await _check(tokens)
    finally:
        await tokens.aclose()
