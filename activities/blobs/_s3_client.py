"""The S3 client every S3 store opens (blobs, tokens, Versions) on an ``S3Location``, and
what its errors mean.

``s3_client_options`` is the botocore configuration of all of them; ``open_s3_client``
opens the asynchronous one (the version store opens botocore's synchronous one with the
same options). ``s3_answering`` is where a store's request that S3 did not answer (a
connection refused, reset or timed out; a throttled or failing server) becomes
``StoreUnavailable``, transient and naming what was asked, the endpoint only in the log;
a refusal (``AccessDenied``, ``NoSuchBucket``, credentials refused) passes as the botocore
error it is.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from psych_runtime.specs import SpecError, StoreUnavailable

_log = logging.getLogger(__name__)

Addressing = Literal["auto", "path", "virtual"]


@dataclass(frozen=True)
class S3Location:
    """Where an ``S3BlobStore`` keeps its blobs, as ``PSYCH_BLOB_URL`` states it.

    Attributes:
        bucket: the bucket's name.
        prefix: prepended to every key: empty, or ending in ``/``.
        endpoint: an S3-compatible server's URL (None: AWS's endpoint for the region, or
            ``AWS_ENDPOINT_URL_S3``/``AWS_ENDPOINT_URL`` when set).
        region: the signing region (None: ``AWS_REGION``/``AWS_DEFAULT_REGION`` or the
            profile's).
        addressing: ``path`` (``<endpoint>/<bucket>/<key>``, what most self-hosted
            servers need), ``virtual`` (``<bucket>.<host>/<key>``) or ``auto``
            (botocore's choice); None: ``path`` with an endpoint, ``auto`` without.
    """

    bucket: str
    prefix: str = ""
    endpoint: str | None = None
    region: str | None = None
    addressing: Addressing | None = None


STORE_ATTEMPTS = 5
"""Attempts of one S3 request (botocore's standard retries) unless botocore's own setting
(``AWS_MAX_ATTEMPTS``, or ``max_attempts`` in the profile) says otherwise."""

# Error codes S3 and S3-compatible servers send for "not now": throttling, and a server
# that timed out waiting for the request (botocore's standard retries take these too).
_BUSY_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestThrottled",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "RequestTimeout",
        "RequestTimeoutException",
        "PriorRequestNotComplete",
    }
)


STORE_RETRY_MODE = "standard"
"""botocore's retry mode of every S3 client psych opens unless botocore's own setting
(``AWS_RETRY_MODE``, or ``retry_mode`` in the profile) says otherwise: botocore's default,
``legacy``, retries fewer errors and backs off less."""
RETRY_MODES = ("standard", "adaptive", "legacy")
"""botocore's retry modes."""


def s3_client_options(
    location: S3Location, *, attempts: int | None = None, mode: str | None = None
) -> dict[str, Any]:
    """The botocore ``Config`` options of every S3 client psych opens on ``location`` (the
    blob, token and version stores); ``attempts``: botocore's ``max_attempts`` setting
    (None: ``STORE_ATTEMPTS``); ``mode``: its ``retry_mode`` setting (None:
    ``STORE_RETRY_MODE``). ``store_retries`` reads both."""
    return {
        "s3": {
            "addressing_style": location.addressing or ("path" if location.endpoint else "auto")
        },
        # Unlike a model provider's client (whose retries Temporal and the Run's budget
        # own), a store read is one step of an activity that may have done more before it
        # (a model call's answer, paid for): a throttled or dropped S3 request is retried
        # here first. What outlasts these is StoreUnavailable, retried by the activity's
        # policy or the Run's transient budget.
        "retries": {
            "mode": mode or STORE_RETRY_MODE,
            "total_max_attempts": attempts or STORE_ATTEMPTS,
        },
        # botocore (1.36 on) adds a CRC checksum to every upload and asks for one on every
        # read unless told otherwise, which several S3-compatible servers refuse; a blob
        # read is checked against its ref (S3BlobStore.get), a Version against its hash.
        "request_checksum_calculation": "when_required",
        "response_checksum_validation": "when_required",
    }


def store_attempts(session: Any) -> int | None:
    """botocore's ``max_attempts`` setting where one is made (``AWS_MAX_ATTEMPTS``, else
    the profile's ``max_attempts``: botocore's order), None when none is.

    Raises:
        SpecError: it is not a whole number of at least 1, naming where it is set (botocore
            itself raised a bare ``ValueError``, "invalid literal for int()").
    """
    said = _setting(session, "AWS_MAX_ATTEMPTS", "max_attempts")
    if said is None or not said[1].strip():
        return None
    where, raw = said
    try:
        attempts = int(raw)
    except ValueError:
        attempts = 0
    if attempts < 1:
        raise SpecError(
            f"{where} is {raw!r}: the attempts of one S3 request must be a whole number, "
            f"at least 1 (unset: {STORE_ATTEMPTS})"
        )
    return attempts


def store_retry_mode(session: Any) -> str | None:
    """botocore's ``retry_mode`` setting where one is made (``AWS_RETRY_MODE``, else the
    profile's ``retry_mode``: botocore's order), None when none is (botocore's default,
    ``legacy``, is then not what the stores use: ``STORE_RETRY_MODE``).

    Raises:
        SpecError: it is not one of botocore's modes, naming where it is set.
    """
    said = _setting(session, "AWS_RETRY_MODE", "retry_mode")
    if said is None or not said[1].strip():
        return None
    where, mode = said
    if mode not in RETRY_MODES:
        raise SpecError(
            f"{where} is {mode!r}: botocore's retry mode is one of {', '.join(RETRY_MODES)} "
            f"(unset: {STORE_RETRY_MODE})"
        )
    return mode


def configured_options(location: S3Location, session: Any) -> dict[str, Any]:
    """``s3_client_options`` with botocore's own retry settings as ``session`` finds them
    (``store_attempts``, ``store_retry_mode``): what every S3 store's client opens with.

    Raises:
        SpecError: a setting is malformed, naming it.
    """
    attempts, mode = store_attempts(session), store_retry_mode(session)
    return s3_client_options(location, attempts=attempts, mode=mode)


def _setting(session: Any, variable: str, name: str) -> tuple[str, str] | None:
    """Where botocore's setting is made and its raw text: the environment's ``variable``,
    else ``name`` in the session's profile (None: neither)."""
    if variable in os.environ:
        return variable, os.environ[variable]
    value = session.get_scoped_config().get(name)
    if value is None:
        return None
    profile = session.get_config_variable("profile") or "default"
    return f"{name} in AWS profile {profile!r}", str(value)


def open_s3_client(location: S3Location) -> Any:
    """An aiobotocore S3 client for ``location`` as an async context manager (the
    ``S3Client`` it yields is typed by the caller); ``S3BlobStore`` and the S3 token store
    open theirs alike."""
    # Imported here: aiobotocore and botocore take about a second to import on this
    # machine, which no worker without an S3 store (and no workflow sandbox, which imports
    # this package for its payload types) should pay.
    from aiobotocore.config import AioConfig

    session = _session()
    config = AioConfig(**configured_options(location, session))
    return session.create_client(
        "s3", endpoint_url=location.endpoint, region_name=location.region, config=config
    )


@functools.cache
def _session() -> Any:
    """The one botocore session of the process: a session loads S3's service model (a few
    megabytes of JSON) once, so every store after the first opens its client quickly."""
    from aiobotocore.session import get_session

    return get_session()


def s3_error_code(err: Any) -> str:
    """The error code of botocore's ``ClientError`` ``err`` ("" if none)."""
    return str(err.response.get("Error", {}).get("Code", ""))


def s3_status(err: Any) -> int | None:
    """The HTTP status of botocore's ``ClientError`` ``err``, if it has one."""
    status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return status if isinstance(status, int) else None


def s3_unanswered(err: BaseException) -> str | None:
    """How S3 did not answer, when ``err`` (from botocore) says it did not: no connection,
    or one refused, reset, timed out or cut mid-response (``connection failed:
    EndpointConnectionError``), a throttled request (``throttled: SlowDown, HTTP 503``) or
    a failing server (``server error: InternalError, HTTP 500``); never the endpoint.
    None for anything else: a refusal (``AccessDenied``, ``NoSuchBucket``, a credential
    refused), a missing object, a configuration error, or not a botocore error at all.
    """
    if "botocore" not in type(err).__module__:
        return None
    from botocore.exceptions import (
        ClientError,
        HTTPClientError,
        IncompleteReadError,
        SSLError,
    )
    from botocore.exceptions import ConnectionError as BotoConnectionError

    if isinstance(err, SSLError):
        return None  # a certificate refused is the deployment's to mend, not a moment's
    if isinstance(err, BotoConnectionError):
        return f"connection failed: {type(err).__name__}"
    if isinstance(err, HTTPClientError | IncompleteReadError):
        return f"connection lost or timed out: {type(err).__name__}"
    if isinstance(err, ClientError):
        code, status = s3_error_code(err), s3_status(err)
        said = ", ".join(part for part in (code, f"HTTP {status}" if status else "") if part)
        if code in _BUSY_CODES or status in (429, 503):
            return f"throttled: {said}"
        if status is not None and status >= 500:
            return f"server error: {said}"
    return None


@contextmanager
def s3_answering(store: str, what: str, where: S3Location, key: str = "") -> Iterator[None]:
    """The block's S3 requests; one that S3 did not answer (``s3_unanswered``) raises
    ``StoreUnavailable`` saying ``<what>: the <store> did not answer (<how>)``, and logs
    the store's own words (the endpoint, the bucket and ``key``: its ``detail``) as a
    warning.

    Raises:
        StoreUnavailable: as said; transient.
    """
    try:
        yield
    except Exception as err:
        how = s3_unanswered(err)
        if how is None:
            raise
        detail = f"at {where.endpoint or 'AWS'} (s3://{where.bucket}/{key or where.prefix}): {err}"
        _log.warning("%s: the %s did not answer %s", what, store, detail)
        # Not chained: botocore's words name the endpoint, an internal address, and an
        # activity's failure carries its causes' messages into the Run's history.
        message = f"{what}: the {store} did not answer ({how})"
        raise StoreUnavailable(message, detail=detail) from None


def store_conflict(
    store: str, what: str, where: S3Location, key: str, attempts: int
) -> StoreUnavailable:
    """The error of a conditional write of ``key`` that S3 answered 409 (another write of
    it under way) ``attempts`` times: ``StoreUnavailable`` saying ``<what>: the <store>
    stayed in conflict (...)``, transient as a throttled request is, the bucket and key
    logged as a warning (its ``detail``), never in the message, which may reach a Run."""
    detail = f"at {where.endpoint or 'AWS'} (s3://{where.bucket}/{key})"
    _log.warning("%s: the %s stayed in conflict %s", what, store, detail)
    message = f"{what}: the {store} stayed in conflict ({attempts} conditional writes answered 409)"
    return StoreUnavailable(message, detail=detail)
