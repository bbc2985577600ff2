"""The blob stores' exceptions pickle and unpickle (and copy) to equal exceptions: class,
message, ``args``, the Temporal fields (``type``, ``non_retryable``, details) and their own
(``ref``, ``errno_name``, ``lasting``, ``detail``, ``damaged``). By default an exception is
rebuilt by calling its class with its ``args``, which these are not built from (keyword-only
arguments, a message built from a ref): ``LocalStoreFailed`` and ``BlobNotFound`` did not
unpickle at all, ``BlobSealRefused`` came back with its message said twice.
"""

from __future__ import annotations

import copy
import pickle
from collections.abc import Awaitable
from pathlib import Path

from temporalio.exceptions import ApplicationError

from psych_runtime.activities.blobs import BlobNotFound, LocalBlobStore, LocalStoreFailed, blob_key
from psych_runtime.activities.blobs._store import BlobSealRefused
from psych_runtime.specs import StoreUnavailable


async def raised(call: Awaitable[object]) -> BaseException:
    try:
        await call
    except Exception as err:
        return err
    raise AssertionError("the call raised nothing")


def same(err: BaseException, back: BaseException) -> None:
    assert type(back) is type(err) and back is not err
    assert (back.args, str(back), vars(back)) == (err.args, str(err), vars(err))
    assert isinstance(err, ApplicationError) and isinstance(back, ApplicationError)
    assert (back.message, back.type, back.non_retryable) == (err.message, err.type, True)
    assert tuple(back.details) == tuple(err.details)


async def test_the_blob_stores_exceptions_pickle_to_equal_ones(tmp_path: Path) -> None:
    root = tmp_path / "blobs"
    store = LocalBlobStore(root)
    ref = await store.put(b"kept")
    (root / blob_key(ref)).write_bytes(b"changed behind the store's back")
    damaged = await raised(LocalBlobStore(root).get(ref))
    missing = await raised(store.get("sha256:" + "0" * 64))
    (root / "no").write_bytes(b"a file where a directory goes")
    failed = await raised(LocalBlobStore(root / "no" / "blobs").put(b"data"))
    assert isinstance(damaged, BlobNotFound) and damaged.damaged
    assert isinstance(missing, BlobNotFound) and not missing.damaged
    assert isinstance(failed, LocalStoreFailed) and isinstance(failed, StoreUnavailable)
    assert (failed.errno_name, failed.lasting) == ("ENOTDIR", True) and failed.detail

    for err in (damaged, missing, failed, BlobSealRefused(ref)):
        same(err, pickle.loads(pickle.dumps(err)))
        same(err, copy.copy(err))
