"""A blob a reader inside a Run cannot read, told to the Run's caller by ref only.

``unreadable_blob`` (``_store``) says such a blob by ref; ``blob_words`` is what the store
(its directory, a bucket's key) or the cipher (key ids) said of it, for the worker's log;
``read_by_ref`` is a read whose failure reaches the Run's caller (a Run's failure reason,
a record) in the first words, the second logged.
"""

from __future__ import annotations

from temporalio import activity

from psych_runtime.activities.blobs._store import (
    BlobNotFound,
    BlobSealRefused,
    BlobStore,
    unreadable_blob,
)


def blob_words(err: BaseException) -> str:
    """For the worker's log: what the store (a directory or bucket key) or the cipher (key
    ids) said of a blob it could not read, which the Run's caller is not told
    (``unreadable_blob``); "" for any other error."""
    if unreadable_blob(err) is None:
        return ""
    told = err.__cause__ if isinstance(err, BlobSealRefused) else err
    return f" ({getattr(told, 'message', None) or told})"


async def read_by_ref(blobs: BlobStore, ref: str, what: str) -> bytes:
    """``blobs.get(ref)`` by a reader whose failure reaches the Run's caller: a blob missing
    or damaged raises ``BlobNotFound`` saying "<what> cannot be read: " and the blob by
    ref (``unreadable_blob``), the store's own words (its directory, a bucket's key) only
    in the worker's log (``blob_words``).

    Raises:
        BlobNotFound: as said; non-retryable, its ``ref`` and ``damaged`` the store's.
        BlobSealRefused: the blob's seal does not open with this worker's keys (its
            message names the ref only; the cipher's words are its cause).
    """
    try:
        return await blobs.get(ref)
    except BlobNotFound as err:
        told = unreadable_blob(err)
        activity.logger.warning("%s cannot be read: %s%s", what, told, blob_words(err))
        message = f"{what} cannot be read: {told}"
        raise BlobNotFound(err.ref, message, damaged=err.damaged) from None
