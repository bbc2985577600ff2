"""Which BlobStore a worker uses, from its environment (``PSYCH_BLOB_URL``, ``PSYCH_BLOB_DIR``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from psych_runtime.activities.blobs._s3 import S3BlobStore
from psych_runtime.activities.blobs._store import BlobStore, LocalBlobStore
from psych_runtime.specs import SpecError


def blob_store_from_env(env: Mapping[str, str], default_dir: str | Path) -> BlobStore:
    """The BlobStore ``env`` names.

    ``PSYCH_BLOB_URL=s3://bucket/prefix?...`` selects an ``S3BlobStore`` (a fleet that
    shares no directory); otherwise ``PSYCH_BLOB_DIR`` (default ``default_dir``) is a
    ``LocalBlobStore``, the embedded default.

    Raises:
        SpecError: both are set (which one wins would be a guess), or the URL is malformed.
    """
    url = env.get("PSYCH_BLOB_URL", "").strip()
    directory = env.get("PSYCH_BLOB_DIR", "").strip()
    if url and directory:
        raise SpecError(
            f"PSYCH_BLOB_URL={url!r} and PSYCH_BLOB_DIR={directory!r} are both set: "
            "a worker keeps its blobs in one store; unset one"
        )
    if url:
        return S3BlobStore.from_url(url)
    return LocalBlobStore(directory or default_dir)
