"""One ``psych serve`` process's push-store writes, for tests that race several processes
over one shared store: ``python -m tests.serve._push_writers MEDIUM WHERE NAME COUNT GO``.

MEDIUM is ``local`` (WHERE a directory), ``sealed`` (a directory, records sealed for their
tenant with the key in ``PSYCH_TEST_KEY``, hex) or ``s3`` (WHERE a ``PSYCH_BLOB_URL``).
Once the file GO exists (so every process starts at once), the process adds COUNT
configurations ``NAME-<i>`` to task ``run-1`` of tenant ``acme`` and COUNT entries
``NAME-<i>`` to the watched index, one change at a time, and exits 0.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

from a2a.types import TaskPushNotificationConfig

from psych_runtime.activities.tokens import (
    LocalTokenStore,
    S3TokenStore,
    TenantSealedTokens,
    TokenStore,
)
from psych_runtime.workers import Key, Keyring, PsychCodec
from psych_runtime.workers.serve.a2a import PushStore, Watched


def _store(medium: str, where: str) -> TokenStore:
    if medium == "local":
        return LocalTokenStore(where)
    if medium == "sealed":
        key = bytes.fromhex(os.environ["PSYCH_TEST_KEY"])
        codec = PsychCodec(Keyring([Key("acme-1", "acme", key)], {"acme": "acme-1"}))
        return TenantSealedTokens(LocalTokenStore(where), codec.blob_cipher())
    if medium == "s3":
        return S3TokenStore.from_url(where)
    raise SystemExit(f"unknown medium {medium!r}: local, sealed or s3")


async def main(medium: str, where: str, name: str, count: int) -> None:
    tokens = _store(medium, where)
    store = PushStore(tokens)
    for i in range(count):
        config_id = f"{name}-{i}"

        def add(configs: dict[str, TaskPushNotificationConfig], config_id: str = config_id) -> bool:
            made = TaskPushNotificationConfig(url=f"http://127.0.0.1:9/{config_id}")
            made.id = config_id
            configs[config_id] = made
            return True

        await store.change("acme", "run-1", add)
        await store.watch([Watched("acme", None, config_id, name, float(i))])
    if isinstance(tokens, S3TokenStore):
        await tokens.aclose()


if __name__ == "__main__":
    medium, where, name, count, go = sys.argv[1:]
    while not Path(go).exists():
        time.sleep(0.005)
    asyncio.run(main(medium, where, name, int(count)))
