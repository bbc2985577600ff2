"""The stores a ``psych`` command opens from its environment, closed by it.

An S3 store (``PSYCH_BLOB_URL``: the blob store, and the token store kept in the same
bucket) opens a client, an aiohttp session and its connection pool, on first use, and
nothing but its ``aclose`` closes it; a directory's store holds nothing open. Each command
that builds stores from the environment closes them through ``close_stores``: ``psych
serve`` at its app's shutdown (``ServeSettings.at_shutdown``), ``psych worker`` and ``psych
dev`` once their workers have stopped, ``psych report --inputs`` once the report is
printed or refused, ``psych oauth-callback`` once its server stops, ``psych validate
--check-connections`` once the check is done, in the event loop that used the store
(``closing_stores``). Before, only ``psych serve`` did, and the others' sessions were
reported "Unclosed client session" when collected.

An S3 version store (``PSYCH_STORE=s3://...``) holds botocore's synchronous client, whose
urllib3 pool closes its sockets when collected, silently; it is closed alike (``serve``,
``worker``, ``dev``, ``run``; ``publish`` with ``close_version_store``) so its keep-alive
connections end with the command rather than with the collector.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from psych_runtime.activities.blobs import S3BlobStore
from psych_runtime.activities.tokens import S3TokenStore
from psych_runtime.activities.versions import S3VersionStore


async def close_stores(*stores: object) -> None:
    """Close each of ``stores`` that holds connections (an ``S3BlobStore``,
    ``S3TokenStore`` or ``S3VersionStore``); the others (a directory's store, None) hold
    none.

    Each is closed even when closing another fails; the last failure is raised, chained
    to those before it.
    """
    async with AsyncExitStack() as closing:
        for store in stores:
            if isinstance(store, S3BlobStore | S3TokenStore):
                closing.push_async_callback(store.aclose)
            else:
                closing.callback(close_version_store, store)


def close_version_store(store: object) -> None:
    """Close ``store`` if it is an ``S3VersionStore`` (its client's connections); a
    directory's store holds none."""
    if isinstance(store, S3VersionStore):
        store.close()


@asynccontextmanager
async def closing_stores(*stores: object) -> AsyncIterator[None]:
    """The block, then ``close_stores(*stores)``, however the block ends (an error, a
    cancellation)."""
    try:
        yield
    finally:
        await close_stores(*stores)
