"""Which VersionStore a worker or ``psych`` command uses: ``PSYCH_STORE``/``--store``."""

from __future__ import annotations

import re
from pathlib import Path

from psych_runtime.activities.versions._s3 import S3VersionStore
from psych_runtime.activities.versions._store import FileVersionStore
from psych_runtime.specs import SpecError

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def version_store_at(
    where: str | Path, *, source: str = "PSYCH_STORE"
) -> FileVersionStore | S3VersionStore:
    """The VersionStore ``where`` names: an ``s3://bucket/prefix?endpoint=...`` URL (the
    blob store's form) is an ``S3VersionStore`` every worker and client of a fleet can
    reach; anything else is the directory of a ``FileVersionStore`` (made when first
    published to). ``source`` is where ``where`` came from (``--store``, ``PSYCH_STORE``),
    for the messages.

    Raises:
        SpecError: an ``s3://`` URL that is malformed (naming what is wrong); an empty
            value; a URL of another scheme (``https://...``), which is no directory either;
            a path that exists and is not a directory.
    """
    text = str(where).strip()
    if not text:
        raise SpecError(f"{source} is empty: name a directory or an s3:// URL")
    if isinstance(where, str) and text[:3].lower() == "s3:":  # parse_s3_url says what is wrong
        return S3VersionStore.from_url("s3" + text[2:], setting=source)
    scheme = _SCHEME.match(text) if isinstance(where, str) else None
    if scheme is not None:
        raise SpecError(
            f"{source} {text[:80]!r}: a {scheme.group(1)}:// URL is not a store; "
            "name a directory or an s3://BUCKET/PREFIX URL"
        )
    path = Path(where)
    if path.exists() and not path.is_dir():
        raise SpecError(
            f"{source} {text!r} is a file, not a directory: name a directory (made when "
            "first published to) or an s3://BUCKET/PREFIX URL"
        )
    return FileVersionStore(path)
