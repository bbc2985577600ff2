"""A TokenStore in an S3-compatible bucket, for worker fleets that share no directory.

Records are objects ``<prefix>tokens/<2 hex>/<62 hex>`` (``TokenKey.location``): under
``tokens/`` so a bucket prefix the fleet's blobs use too never mixes the two. The client is
the blob store's (aiobotocore, botocore's credential chain; ``open_s3_client``); the
worker's credentials need ``s3:DeleteObject`` on the prefix as well as the blob store's.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING

from psych_runtime.activities.blobs import S3Location, open_s3_client, parse_s3_url, s3_error_code
from psych_runtime.activities.tokens._store import TokenKey

if TYPE_CHECKING:
    from types_aiobotocore_s3.client import S3Client

TOKENS_PREFIX = "tokens/"


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
        """The record under ``key``, or None."""
        from botocore.exceptions import ClientError

        s3 = await self._s3()
        try:
            response = await s3.get_object(Bucket=self.location.bucket, Key=self.object_key(key))
            async with response["Body"] as body:
                return await body.read()
        except ClientError as err:
            if s3_error_code(err) in ("NoSuchKey", "404"):
                return None
            raise

    async def put(self, key: TokenKey, record: bytes) -> None:
        """Store ``record`` under ``key``, replacing any record there."""
        s3 = await self._s3()
        await s3.put_object(Bucket=self.location.bucket, Key=self.object_key(key), Body=record)

    async def delete(self, key: TokenKey) -> None:
        """Remove the record under ``key`` (S3 answers a missing one with success)."""
        s3 = await self._s3()
        await s3.delete_object(Bucket=self.location.bucket, Key=self.object_key(key))

    async def aclose(self) -> None:
        """Close the client (a later call opens a new one)."""
        self._client = None
        await self._stack.aclose()
