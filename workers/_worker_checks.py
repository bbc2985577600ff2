"""What a worker checks and adjusts in its wiring before it starts: blob and token store
sealing under the client's codec, client retries long enough for the outage it should
survive, and the SDK's one benign warning kept quiet."""

from __future__ import annotations

import logging
import warnings

from temporalio.client import Client
from temporalio.service import RetryConfig

from psych_runtime.activities.blobs import BlobStore, EncryptedBlobStore, TenantSealedBlobs
from psych_runtime.activities.tokens import (
    EncryptedTokenStore,
    TenantSealedTokens,
    TokenStore,
    unsealed,
)
from psych_runtime.activities.tools import OUTAGE_MARGIN
from psych_runtime.workers.codec import find_psych_codec
from psych_runtime.workflows import TenantBlobs

DEFAULT_OUTAGE_SECONDS = 60.0


def sealed_blobs(client: Client, blobs: BlobStore) -> BlobStore:
    """``blobs`` encrypting under the client's keys, when the client encrypts payloads
    (``PsychCodec``) and the store does not already: a message kept out of history must
    not sit in clear in the blob store."""
    codec = find_psych_codec(client.data_converter.payload_codec)
    if codec is None or isinstance(blobs, EncryptedBlobStore):
        return blobs
    return EncryptedBlobStore(blobs, codec.blob_cipher())


def tenant_sealed_blobs(client: Client, blobs: BlobStore) -> TenantBlobs:
    """What a client reads ``blobs`` through (``PsychClient(blobs=...)``): as it is, or,
    when the client encrypts payloads, the store sealed for the tenant it reads for (a
    process acting for tenants outside any Run: ``psych report``, ``psych serve``)."""
    codec = find_psych_codec(client.data_converter.payload_codec)
    if codec is None:
        return blobs
    cipher = codec.blob_cipher()
    inner = blobs.inner if isinstance(blobs, EncryptedBlobStore) else blobs
    return lambda tenant: TenantSealedBlobs(inner, cipher, tenant)


def sealed_tokens(client: Client, tokens: TokenStore) -> TokenStore:
    """``tokens`` encrypting under the client's keys, when the client encrypts payloads and
    the store does not already: an OAuth token must not sit in clear in the token store."""
    codec = find_psych_codec(client.data_converter.payload_codec)
    if codec is None or isinstance(tokens, EncryptedTokenStore):
        return tokens
    return EncryptedTokenStore(tokens, codec.blob_cipher())


def tenant_sealed_tokens(client: Client, tokens: TokenStore) -> TokenStore:
    """``tokens`` sealing each record for the tenant its key names, under the client's keys,
    when the client encrypts payloads: for a process that acts for tenants outside any Run
    (``psych serve``), which ``sealed_tokens``' Run-bound sealing refuses."""
    codec = find_psych_codec(client.data_converter.payload_codec)
    if codec is None:
        return tokens
    return TenantSealedTokens(unsealed(tokens), codec.blob_cipher())


def check_outage_retry(client: Client, outage_seconds: float) -> None:
    """Say so when the client gives up before the outage the worker should survive."""
    retry = client.service_client.config.retry_config
    lasts = None if retry is None else retry.max_elapsed_time_millis
    if outage_seconds > 0 and lasts is not None and lasts < outage_seconds * 1000:
        logging.getLogger(__name__).warning(
            "this worker's Temporal client retries for %.0f s only: a tool call that "
            "finishes while the server is away longer is recorded UNKNOWN (outage_seconds "
            "is %.0f; connect with psych_runtime.workers.connect, or retry_config="
            "outage_retry())",
            lasts / 1000,
            outage_seconds,
        )


def outage_retry(seconds: float = DEFAULT_OUTAGE_SECONDS) -> RetryConfig:
    """Client retries that outlast a server outage of ``seconds`` (the SDK's default gives
    up after 10 s): what a worker's client needs to report a call that finished while the
    server was away."""
    elapsed = int((seconds + OUTAGE_MARGIN) * 1000)
    return RetryConfig(max_elapsed_time_millis=elapsed, max_retries=10_000)


def quiet_benign_cancel_warning() -> None:
    """Ignore the SDK's ``Cannot find activity to cancel for token ...`` warning.

    The Temporal core may ask the Python worker to cancel an activity that has just
    finished (a local activity whose workflow task was evicted, or whose Run ended, as it
    completed): nothing is left to cancel, and the core's own log of the same race is at
    debug level (temporalio/sdk-rust#282). The Python SDK raises it as a ``UserWarning``
    from its activity poll loop, so a process that turns warnings into errors (``python
    -W error``, a test run) loses its whole activity worker to it, and ``psych dev``
    printed it between a Run's lines. Only that message from that module is ignored.
    """
    warnings.filterwarnings(
        "ignore",
        message="Cannot find activity to cancel for token",
        category=UserWarning,
        module="temporalio.worker._activity",
    )
