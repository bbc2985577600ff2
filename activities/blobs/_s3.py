"""A BlobStore in an S3-compatible bucket, for worker fleets that share no directory.

Blobs are objects ``<prefix><2 hex>/<62 hex>``, the layout of ``LocalBlobStore``. The
client is aiobotocore (see docs/decisions/activities.md for the choice): credentials come from
botocore's standard chain (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/
``AWS_SESSION_TOKEN``, ``AWS_PROFILE`` and the shared files, web identity, container and
instance metadata), never from the URL.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from types import TracebackType
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

from psych_runtime.activities.blobs._recent import RECENT_BLOB_BYTES, RecentBlobs
from psych_runtime.activities.blobs._s3_client import (
    S3Location,
    open_s3_client,
    s3_answering,
    s3_error_code,
    s3_status,
    store_conflict,
)
from psych_runtime.activities.blobs._store import BlobNotFound, blob_key
from psych_runtime.activities.contract import blob_ref
from psych_runtime.specs import SpecError

if TYPE_CHECKING:
    from types_aiobotocore_s3.client import S3Client

URL_FORM = "s3://BUCKET[/PREFIX][?endpoint=URL&region=NAME&addressing=path|virtual|auto]"
"""What ``PSYCH_BLOB_URL`` looks like (``parse_s3_url``)."""

_PARAMETERS = ("addressing", "endpoint", "region")
STORE_KIND = "S3 blob store"
"""How a ``StoreUnavailable`` of this store names it (never where it is)."""
CONFLICT_ATTEMPTS = 5
"""Conditional writes of one key that collide (S3 answers 409) are tried this often."""


def conflict_delay(attempt: int) -> float:
    """Seconds to wait before trying again after the ``attempt``-th (from 0) 409."""
    return 0.05 * (attempt + 1)


def parse_s3_url(url: str, *, setting: str = "PSYCH_BLOB_URL") -> S3Location:
    """Read ``s3://bucket/prefix?endpoint=...&region=...&addressing=...`` (``setting``:
    the variable it came from, which the errors name).

    Raises:
        SpecError: the URL is not of that form (it names what is wrong): another scheme,
            no bucket, credentials or a port in it, an unknown or repeated parameter, an
            endpoint that is not an http(s) URL.
    """
    where = f"{setting}={url!r}"
    parts = urlsplit(url)
    if parts.scheme != "s3":
        raise SpecError(f"{where}: not an s3:// URL ({URL_FORM})")
    if "@" in parts.netloc:
        # A URL ends up in config maps, logs and `ps`; keys belong in the credential chain.
        raise SpecError(
            f"{where}: credentials do not go in the URL; set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY (or a profile or role)"
        )
    if not parts.netloc or ":" in parts.netloc:
        raise SpecError(f"{where}: the host part must be a bucket name ({URL_FORM})")
    if parts.fragment:
        raise SpecError(f"{where}: a fragment (#...) means nothing here ({URL_FORM})")
    query = parse_qs(parts.query, keep_blank_values=True, strict_parsing=False)
    unknown = sorted(set(query) - set(_PARAMETERS))
    if unknown:
        raise SpecError(
            f"{where}: unknown parameter(s) {', '.join(unknown)}; known: {', '.join(_PARAMETERS)}"
        )
    values: dict[str, str] = {}
    for name, given in query.items():
        if len(given) != 1 or not given[0]:
            raise SpecError(f"{where}: parameter {name} must be given once, with a value")
        values[name] = given[0]
    endpoint = values.get("endpoint")
    if endpoint is not None:
        target = urlsplit(endpoint)
        if target.scheme not in ("http", "https") or not target.netloc:
            raise SpecError(f"{where}: endpoint {endpoint!r} is not an http(s) URL")
    addressing = values.get("addressing")
    if addressing is not None and addressing not in ("auto", "path", "virtual"):
        raise SpecError(f"{where}: addressing must be path, virtual or auto, not {addressing!r}")
    prefix = parts.path.strip("/")
    return S3Location(
        bucket=parts.netloc,
        prefix=f"{prefix}/" if prefix else "",
        endpoint=endpoint,
        region=values.get("region"),
        addressing=addressing,  # type: ignore[arg-type]  # checked against the Literal above
    )


class S3BlobStore:
    """Blobs as objects in an S3-compatible bucket (``PSYCH_BLOB_URL=s3://...``).

    ``put`` is idempotent without rewriting: it writes with ``If-None-Match: *``, so an
    object already stored under the ref is left as it is (S3 answers 412) and the ref
    returned, however many workers store the same bytes at once. A server that ignores
    conditional writes overwrites the object with the same bytes instead. An object found
    there is read back first (unless this store wrote or read it last): one that does not
    hold the bytes (torn, or written by something else) is written over whole, so a put
    mends what ``get`` refuses as damaged. ``get`` of a
    missing object raises ``BlobNotFound`` naming the ref and the object; the worker's
    credentials need ``s3:ListBucket`` on the bucket for that, or S3 answers a missing
    key with 403 AccessDenied, which is raised as the botocore error it is, as are other
    refusals (``NoSuchBucket``, credentials refused). A request S3 did not answer, after
    botocore's retries (a connection refused, reset or timed out; ``SlowDown`` or another
    5xx) raises ``StoreUnavailable``, transient, naming the blob by ref and the store's
    kind, never its endpoint, which is logged (``s3_answering``).

    The client (a connection pool) is opened on first use in the running event loop;
    ``aclose()`` it when done, or use the store as an ``async with`` block.
    """

    def __init__(self, location: S3Location, *, recent_bytes: int = RECENT_BLOB_BYTES) -> None:
        """A store in ``location``, keeping the blobs it wrote or read last in memory up to
        ``recent_bytes`` (``RecentBlobs``; 0: every read is a request)."""
        self.location = location
        self._stack = AsyncExitStack()
        self._client: S3Client | None = None
        self._opening = asyncio.Lock()
        self._recent = RecentBlobs(recent_bytes)

    @classmethod
    def from_url(cls, url: str, *, recent_bytes: int = RECENT_BLOB_BYTES) -> S3BlobStore:
        """A store at ``s3://bucket/prefix?endpoint=...&region=...`` (``parse_s3_url``)."""
        return cls(parse_s3_url(url), recent_bytes=recent_bytes)

    def __repr__(self) -> str:
        where = self.location.endpoint or "AWS"
        return f"S3BlobStore(s3://{self.location.bucket}/{self.location.prefix} at {where})"

    def _key(self, ref: str) -> str:
        return self.location.prefix + blob_key(ref)

    async def _s3(self) -> S3Client:
        if self._client is None:
            async with self._opening:
                if self._client is None:
                    opened: S3Client = await self._stack.enter_async_context(
                        open_s3_client(self.location)
                    )
                    self._client = opened
        return self._client

    def ref_of(self, data: bytes) -> str:
        """The ref ``put(data)`` returns: the hash of its bytes (``KnowsRefs``)."""
        return blob_ref(data)

    async def put(self, data: bytes) -> str:
        """Store ``data`` unless an object with its ref exists; return its ref.

        Raises:
            StoreUnavailable: S3 did not answer (``s3_answering``), naming the ref.
        """
        ref = blob_ref(data)
        key = self._key(ref)
        with s3_answering(STORE_KIND, f"blob {ref} cannot be stored", self.location, key):
            return await self._put(ref, key, data)

    async def _put(self, ref: str, key: str, data: bytes) -> str:
        from botocore.exceptions import ClientError

        s3 = await self._s3()
        for attempt in range(CONFLICT_ATTEMPTS):
            try:
                await s3.put_object(
                    Bucket=self.location.bucket, Key=key, Body=data, IfNoneMatch="*"
                )
                self._recent.keep(ref, data)
                return ref
            except ClientError as err:
                status = s3_status(err)
                if status == 412:
                    # Present, but whole only if it holds ``data``: an object torn or
                    # written by something else (a damaged local store synced into the
                    # bucket) is mended by this put, as LocalBlobStore mends a torn file.
                    # One kept here was whole when this store last wrote or read it.
                    if self._recent.get(ref) is None and not await self._holds(s3, key, data):
                        await s3.put_object(Bucket=self.location.bucket, Key=key, Body=data)
                    self._recent.keep(ref, data)
                    return ref
                # 409 ConditionalRequestConflict: another conditional write of this key is
                # in progress; it may yet fail, so try again rather than assume it stored.
                if status != 409:
                    raise
                await asyncio.sleep(conflict_delay(attempt))
        what = f"blob {ref} cannot be stored"
        raise store_conflict(STORE_KIND, what, self.location, key, CONFLICT_ATTEMPTS)

    async def _holds(self, s3: S3Client, key: str, data: bytes) -> bool:
        """Whether the object ``key`` holds exactly ``data`` (False if it went meanwhile)."""
        from botocore.exceptions import ClientError

        try:
            response = await s3.get_object(Bucket=self.location.bucket, Key=key)
            async with response["Body"] as body:
                found: bytes = await body.read()
        except ClientError as err:
            if s3_error_code(err) in ("NoSuchKey", "404"):
                return False
            raise
        return found == data

    async def get(self, ref: str) -> bytes:
        """The bytes stored under ``ref``.

        Raises:
            BlobNotFound: no object holds ``ref``, or it is not a blob ref.
            StoreUnavailable: S3 did not answer (``s3_answering``), naming the ref.
        """
        from botocore.exceptions import ClientError

        key = self._key(ref)  # checks the ref first, kept or not
        data = self._recent.get(ref)
        if data is not None:
            return data
        s3 = await self._s3()
        try:
            with s3_answering(STORE_KIND, f"blob {ref} cannot be read", self.location, key):
                response = await s3.get_object(Bucket=self.location.bucket, Key=key)
                async with response["Body"] as body:
                    data = await body.read()
        except ClientError as err:
            if s3_error_code(err) in ("NoSuchKey", "404"):
                raise BlobNotFound(
                    ref, f"no blob {ref} in s3://{self.location.bucket}/{key}"
                ) from err
            raise
        if blob_ref(data) != ref:
            # Changed behind the store's back (or written by something else under this
            # key): never handed out, nor kept, as LocalBlobStore refuses a damaged file.
            raise BlobNotFound(
                ref,
                f"the object of {ref} in s3://{self.location.bucket}/{key} is damaged: its "
                "bytes hash otherwise",
                damaged=True,
            )
        self._recent.keep(ref, data)
        return data

    async def aclose(self) -> None:
        """Close the client and its connections (a later call opens a new one)."""
        self._client = None
        await self._stack.aclose()

    async def __aenter__(self) -> S3BlobStore:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()
