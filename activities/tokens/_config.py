"""Which TokenStore a worker uses, from its environment: next to its blobs."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from psych_runtime.activities.tokens._s3 import S3TokenStore
from psych_runtime.activities.tokens._store import LocalTokenStore, TokenStore
from psych_runtime.specs import SpecError


def token_store_from_env(env: Mapping[str, str], default_dir: str | Path) -> TokenStore:
    """The TokenStore ``env`` names.

    ``PSYCH_TOKEN_DIR`` is a ``LocalTokenStore``; otherwise a fleet whose blobs are in a
    bucket (``PSYCH_BLOB_URL=s3://...``) keeps its tokens there too, under ``tokens/``
    (``S3TokenStore``), so every worker of it sees the same tokens; otherwise the
    directory ``default_dir``.

    Raises:
        SpecError: ``PSYCH_TOKEN_DIR`` is set with ``PSYCH_BLOB_URL`` (the fleet shares a
            bucket, a directory of one machine would split its tokens), or the URL is
            malformed.
    """
    url = env.get("PSYCH_BLOB_URL", "").strip()
    directory = env.get("PSYCH_TOKEN_DIR", "").strip()
    if url and directory:
        raise SpecError(
            f"PSYCH_TOKEN_DIR={directory!r} is set with PSYCH_BLOB_URL={url!r}: a fleet "
            "sharing a bucket keeps its tokens in it (under tokens/); unset PSYCH_TOKEN_DIR"
        )
    if url:
        return S3TokenStore.from_url(url)
    return LocalTokenStore(directory or default_dir)
