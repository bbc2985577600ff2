"""A TokenStore in an S3-compatible bucket, for worker fleets that share no directory.

Records are objects ``<prefix>tokens/<2 hex>/<62 hex>`` (``TokenKey.location``): under
``tokens/`` so a bucket prefix the fleet's blobs use too never mixes the two. The client is
the blob store's (aiobotocore, botocore's credential chain; ``open_s3_client``); the
worker's credentials need ``s3:DeleteObject`` on the prefix as well as the blob store's.
An ``update`` is a conditional write (``If-Match`` the ETag it read, ``If-None-Match: *``
when there was none; a conditional delete), tried again on what another writer left.
"""

from __future__ import annotations

import asyncio
import random
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING

from psych_runtime.activities.blobs import (
    S3Location,
    open_s3_client,
    parse_s3_url,
    s3_answering,
    s3_error_code,
    s3_status,
)
from psych_runtime.activities.tokens._store import Change, TokenKey
from psych_runtime.specs import PsychError

if TYPE_CHECKING:
    from types_aiobotocore_s3.client import S3Client

TOKENS_PREFIX = "tokens/"
STORE_KIND = "S3 token store"
"""How a ``StoreUnavailable`` of this store names it (never where it is)."""
UPDATE_ATTEMPTS = 30
"""An ``update`` whose conditional write another writer beat is tried this often."""


def _update_delay(attempt: int) -> float:
    """Seconds before the next try after the ``attempt``-th (from 0) lost one: random, so
    writers that collided do not collide again in step."""
    return random.uniform(0.005, 0.02 * min(attempt + 1, 10))


class S3TokenStore:
    """Token records as objects in an S3-compatible bucket (``TokenStore``).

    A put replaces the object (a refreshed token replaces the old one). Two workers
    refreshing one key at once leave one of their tokens; with a server that rotates
    refresh tokens the other's is then refused, and its session takes the stored token
    (``ConsentProvider``) instead of asking again. The client opens on first use;
    ``aclose()`` when done.
    """

    def __init__(self, location: S3Location) -> None:
        self.location = location
        self._stack = AsyncExitStack()
        self._client: S3Client | None = None
        self._opening = asyncio.Lock()

    @classmethod
    def from_url(cls, url: str) -> S3TokenStore:
        """A store at ``s3://bucket/prefix?endpoint=...`` (the blob store's URL form)."""
        return cls(parse_s3_url(url))

    def __repr__(self) -> str:
        where = self.location.endpoint or "AWS"
        prefix = self.location.prefix + TOKENS_PREFIX
        return f"S3TokenStore(s3://{self.location.bucket}/{prefix} at {where})"

    def object_key(self, key: TokenKey) -> str:
        """The object a record of ``key`` is stored as."""
        return self.location.prefix + TOKENS_PREFIX + key.location()

    async def _s3(self) -> S3Client:
        if self._client is None:
            async with self._opening:
                if self._client is None:
                    opened: S3Client = await self._stack.enter_async_context(
                        open_s3_client(self.location)
                    )
                    self._client = opened
        return self._client

    async def get(self, key: TokenKey) -> bytes | None:
        """The record under ``key``, or None.

        Raises:
            StoreUnavailable: S3 did not answer (``s3_answering``), naming ``key``.
        """
        return (await self._read(key))[0]

    async def _read(self, key: TokenKey) -> tuple[bytes | None, str | None]:
        """The record under ``key`` and its ETag, or (None, None)."""
        from botocore.exceptions import ClientError

        s3 = await self._s3()
        name = self.object_key(key)
        try:
            with s3_answering(
                STORE_KIND, f"the token record {key!r} cannot be read", self.location, name
            ):
                response = await s3.get_object(Bucket=self.location.bucket, Key=name)
                async with response["Body"] as body:
                    return await body.read(), response["ETag"]
        except ClientError as err:
            if s3_error_code(err) in ("NoSuchKey", "404"):
                return None, None
            raise

    async def update(self, key: TokenKey, change: Change) -> None:
        """Replace the record under ``key`` by ``change(record)``: written on condition
        that the object is still the one read, else read again and ``change`` again.

        Raises:
            PsychError: other writers changed the record under each of ``UPDATE_ATTEMPTS``
                tries.
            StoreUnavailable: S3 did not answer (``s3_answering``), naming ``key``.
            Exception: what ``change`` raises (nothing is written).
        """
        with s3_answering(
            STORE_KIND,
            f"the token record {key!r} cannot be updated",
            self.location,
            self.object_key(key),
        ):
            await self._update(key, change)

    async def _update(self, key: TokenKey, change: Change) -> None:
        from botocore.exceptions import ClientError

        s3 = await self._s3()
        bucket, name = self.location.bucket, self.object_key(key)
        for attempt in range(UPDATE_ATTEMPTS):
            current, etag = await self._read(key)
            new = change(current)
            if new == current:
                return
            try:
                if new is None:
                    assert etag is not None  # new != current: there was a record
                    await s3.delete_object(Bucket=bucket, Key=name, IfMatch=etag)
                elif etag is None:
                    await s3.put_object(Bucket=bucket, Key=name, Body=new, IfNoneMatch="*")
                else:
                    await s3.put_object(Bucket=bucket, Key=name, Body=new, IfMatch=etag)
                return
            except ClientError as err:
                # 412: another write came first; 409: one is under way; 404: the record
                # read was deleted since. Each: read what is there now and change that.
                if s3_status(err) not in (404, 409, 412):
                    raise
            await asyncio.sleep(_update_delay(attempt))
        raise PsychError(
            f"token record {key!r}: s3://{bucket}/{name} was changed "
            f"by other writers under each of {UPDATE_ATTEMPTS} conditional writes"
        )

    async def put(self, key: TokenKey, record: bytes) -> None:
        """Store ``record`` under ``key``, replacing any record there.

        Raises:
            StoreUnavailable: S3 did not answer (``s3_answering``), naming ``key``.
        """
        s3 = await self._s3()
        name = self.object_key(key)
        with s3_answering(
            STORE_KIND, f"the token record {key!r} cannot be stored", self.location, name
        ):
            await s3.put_object(Bucket=self.location.bucket, Key=name, Body=record)

    async def delete(self, key: TokenKey) -> None:
        """Remove the record under ``key`` (S3 answers a missing one with success).

        Raises:
            StoreUnavailable: S3 did not answer (``s3_answering``), naming ``key``.
        """
        s3 = await self._s3()
        name = self.object_key(key)
        with s3_answering(
            STORE_KIND, f"the token record {key!r} cannot be deleted", self.location, name
        ):
            await s3.delete_object(Bucket=self.location.bucket, Key=name)

    async def aclose(self) -> None:
        """Close the client (a later call opens a new one)."""
        self._client = None
        await self._stack.aclose()
