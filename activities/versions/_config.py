"""Which VersionStore a worker or ``psych`` command uses: ``PSYCH_STORE``/``--store``."""

from __future__ import annotations

from pathlib import Path

from psych_runtime.activities.versions._s3 import S3VersionStore
from psych_runtime.activities.versions._store import FileVersionStore


def version_store_at(where: str | Path) -> FileVersionStore | S3VersionStore:
    """The VersionStore ``where`` names: an ``s3://bucket/prefix?endpoint=...`` URL (the
    blob store's form) is an ``S3VersionStore`` every worker and client of a fleet can
    reach; anything else is the directory of a ``FileVersionStore``.

    Raises:
        SpecError: an ``s3://`` URL that is malformed (naming what is wrong).
    """
    text = str(where)
    if text.startswith("s3:"):
        return S3VersionStore.from_url(text)
    return FileVersionStore(where)
