"""Which BlobStore a worker uses, from its environment (``PSYCH_BLOB_URL``, ``PSYCH_BLOB_DIR``)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from psych_runtime.activities.blobs._s3 import S3BlobStore
from psych_runtime.activities.blobs._store import BlobStore, LocalBlobStore
from psych_runtime.specs import SpecError


def blob_store_from_env(
    env: Mapping[str, str], default_dir: str | Path, *, writes: bool = True
) -> BlobStore:
    """The BlobStore ``env`` names.

    ``PSYCH_BLOB_URL=s3://bucket/prefix?...`` selects an ``S3BlobStore`` (a fleet that
    shares no directory); otherwise ``PSYCH_BLOB_DIR`` (default ``default_dir``) is a
    ``LocalBlobStore``, the embedded default. ``writes=False``: for a process that only
    reads what the workers wrote (``psych report --inputs``, ``psych serve``), whose user
    need not be able to write the directory.

    Raises:
        SpecError: both are set (which one wins would be a guess), the URL is malformed,
            or the directory is a file or (``writes``) cannot be written to (every blob
            written to it would fail, at the first Run rather than here).
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
    root = Path(directory or default_dir)
    where = f"PSYCH_BLOB_DIR {directory!r}" if directory else f"the blob directory {str(root)!r}"
    if root.exists() and not root.is_dir():
        raise SpecError(
            f"{where} is a file, not a directory: name a directory (made when first written "
            "to), or a bucket with PSYCH_BLOB_URL"
        )
    why = _unwritable(root) if writes else None
    if why is not None:
        raise SpecError(
            f"{where} cannot be written to ({why}): give the worker's user write access, or "
            "name another directory"
        )
    return LocalBlobStore(root)


def _unwritable(root: Path) -> str | None:
    """Why the worker could not write blobs under ``root`` (None: it can). A directory
    that exists is probed with a file of its own (what a blob write does); one that does
    not is made on the first write, so its nearest existing parent must be writable."""
    if root.is_dir():
        try:
            handle, probe = tempfile.mkstemp(prefix=".write-probe-", dir=root)
        except OSError as err:
            return err.strerror or type(err).__name__
        os.close(handle)
        os.unlink(probe)
        return None
    parent = root.absolute().parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return f"{str(parent)!r} is not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"it does not exist and {str(parent)!r} does not let this user make it"
    return None
