"""Which VersionStore a worker or ``psych`` command uses: ``PSYCH_STORE``/``--store``."""

from __future__ import annotations

import re
from pathlib import Path

from psych_runtime.activities.versions._s3 import S3VersionStore
from psych_runtime.activities.versions._store import FileVersionStore
from psych_runtime.specs import SpecError

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def version_store_at(where: str | Path) -> FileVersionStore | S3VersionStore:
    """The VersionStore ``where`` names: an ``s3://bucket/prefix?endpoint=...`` URL (the
    blob store's form) is an ``S3VersionStore`` every worker and client of a fleet can
    reach; anything else is the directory of a ``FileVersionStore``.

    Raises:
        SpecError: an ``s3://`` URL that is malformed (naming what is wrong); an empty
            value; a URL of another scheme (``https://...``), which is no directory either.
    """
    if isinstance(where, Path):
        return FileVersionStore(where)
    text = where.strip()
    if not text:
        raise SpecError("PSYCH_STORE/--store is empty: name a directory or an s3:// URL")
    if text[:3].lower() == "s3:":  # any spelling of it: parse_s3_url names what is wrong
        return S3VersionStore.from_url("s3" + text[2:])
    scheme = _SCHEME.match(text)
    if scheme is not None:
        raise SpecError(
            f"PSYCH_STORE/--store {text[:80]!r}: a {scheme.group(1)}:// URL is not a store; "
            "name a directory or an s3://BUCKET/PREFIX URL"
        )
    return FileVersionStore(text)
