"""psych_runtime.activities.blobs: content-addressed blobs (the BlobStore port).

``LocalBlobStore`` (a directory), ``S3BlobStore`` (S3-compatible), each keeping its
recent blobs in memory (``RecentBlobs``), ``EncryptedBlobStore`` with its ``BlobCipher``
port (a seal that does not open: ``BlobSealRefused``), ``TenantSealedBlobs`` (sealed for a
tenant the caller names, outside a Run) with its ``TenantCipher`` port, the conversation
chain stored in them (``Conversations``), the store a worker's environment configures
(``blob_store_from_env``), and a blob a reader in a Run cannot read, told by ref
(``unreadable_blob``, ``read_by_ref``; the store's words for the log: ``blob_words``), and
the S3 client every S3 store opens, with what its errors mean (``s3_answering``: S3 not
answering is ``StoreUnavailable``; a local store's disk error, ``LocalStoreFailed``, one
too: ``disk_answering``, which the local token and version stores use as well).
"""

from psych_runtime.activities.blobs._config import blob_store_from_env
from psych_runtime.activities.blobs._disk import LocalStoreFailed, disk_answering
from psych_runtime.activities.blobs._recent import RECENT_BLOB_BYTES, RecentBlobs, RecentByRef
from psych_runtime.activities.blobs._s3 import (
    CONFLICT_ATTEMPTS,
    S3BlobStore,
    conflict_delay,
    parse_s3_url,
)
from psych_runtime.activities.blobs._s3_client import (
    STORE_ATTEMPTS,
    STORE_RETRY_MODE,
    S3Location,
    configured_options,
    open_s3_client,
    s3_answering,
    s3_client_options,
    s3_error_code,
    s3_status,
    s3_unanswered,
    store_attempts,
    store_conflict,
    store_retry_mode,
)
from psych_runtime.activities.blobs._sealed import BlobCipher, EncryptedBlobStore
from psych_runtime.activities.blobs._store import (
    BlobNotFound,
    BlobSealRefused,
    BlobStore,
    Conversations,
    KnowsRefs,
    LocalBlobStore,
    blob_key,
    canonical_json,
    ref_without_storing,
    unreadable_blob,
)
from psych_runtime.activities.blobs._tenant import TenantCipher, TenantSealedBlobs
from psych_runtime.activities.blobs._unreadable import blob_words, read_by_ref
from psych_runtime.activities.contract import blob_ref

__all__ = [
    "BlobCipher",
    "BlobNotFound",
    "BlobSealRefused",
    "BlobStore",
    "CONFLICT_ATTEMPTS",
    "Conversations",
    "EncryptedBlobStore",
    "KnowsRefs",
    "LocalBlobStore",
    "LocalStoreFailed",
    "RECENT_BLOB_BYTES",
    "RecentBlobs",
    "RecentByRef",
    "S3BlobStore",
    "S3Location",
    "STORE_ATTEMPTS",
    "STORE_RETRY_MODE",
    "TenantCipher",
    "TenantSealedBlobs",
    "blob_key",
    "blob_ref",
    "blob_store_from_env",
    "blob_words",
    "canonical_json",
    "configured_options",
    "conflict_delay",
    "disk_answering",
    "open_s3_client",
    "parse_s3_url",
    "read_by_ref",
    "ref_without_storing",
    "s3_answering",
    "s3_client_options",
    "s3_error_code",
    "s3_status",
    "s3_unanswered",
    "store_attempts",
    "store_conflict",
    "store_retry_mode",
    "unreadable_blob",
]
