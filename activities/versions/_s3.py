"""A VersionStore in an S3-compatible bucket, for fleets that share no directory.

A Version is the object ``<prefix>versions/<hex digest>.json`` (the layout of
``FileVersionStore``, under ``versions/`` so the bucket prefix the fleet's blobs and tokens
use never mixes them). The VersionStore port is synchronous (``PsychClient.publish`` and
the ``psych`` commands call it as it is; the publish activity calls it in a thread), so the
client is botocore's own, not aiobotocore's; its configuration and credentials are the blob
store's (``open_s3_client``): botocore's standard chain, never the URL.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from psych_runtime.activities.blobs import (
    CONFLICT_ATTEMPTS,
    S3Location,
    configured_options,
    conflict_delay,
    parse_s3_url,
    s3_answering,
    s3_error_code,
    s3_status,
    store_conflict,
)
from psych_runtime.activities.versions._store import (
    digest_of,
    is_digest,
    repaired,
    stored_version,
)
from psych_runtime.specs import (
    AgentSpec,
    NotFound,
    StoreDamaged,
    Version,
    WorkflowSpec,
)

VERSIONS_PREFIX = "versions/"
STORE_KIND = "S3 version store"
"""How a ``StoreUnavailable`` of this store names it (never where it is)."""


class S3VersionStore:
    """Versions as objects in an S3-compatible bucket (``PSYCH_STORE=s3://...``).

    ``publish`` writes with ``If-None-Match: *``: the first publisher of a hash wins and
    every later one (another worker, a retried activity) reads that Version back, so all
    agree on its ``published_at``. ``get`` re-verifies what it reads, as the file store does.
    The client opens on first use (thread-safe; botocore clients are); ``close()`` ends its
    connections when done (a keep-alive connection otherwise stays open until the client
    is collected). A request S3 did not answer raises ``StoreUnavailable`` naming the
    Version by hash, not the endpoint (``s3_answering``).
    """

    def __init__(self, location: S3Location) -> None:
        self.location = location
        self._client: Any = None
        self._opening = threading.Lock()

    @classmethod
    def from_url(cls, url: str, *, setting: str = "PSYCH_STORE") -> S3VersionStore:
        """A store at ``s3://bucket/prefix?endpoint=...`` (the blob store's URL form).

        Raises:
            SpecError: the URL is malformed (naming ``setting`` and what is wrong).
        """
        return cls(parse_s3_url(url, setting=setting))

    def __repr__(self) -> str:
        where = self.location.endpoint or "AWS"
        prefix = self.location.prefix + VERSIONS_PREFIX
        return f"S3VersionStore(s3://{self.location.bucket}/{prefix} at {where})"

    def object_key(self, version_hash: str) -> str:
        """The object the Version ``version_hash`` is stored as.

        Raises:
            SpecError: ``version_hash`` is not a Version hash.
        """
        return f"{self.location.prefix}{VERSIONS_PREFIX}{digest_of(version_hash)}.json"

    def _s3(self) -> Any:
        with self._opening:
            if self._client is None:
                self._client = _client(self.location)
            return self._client

    def publish(self, spec: AgentSpec | WorkflowSpec) -> Version:
        """Store ``spec``, or return the Version already stored with its hash.

        Raises:
            StoreUnavailable: S3 did not answer (``s3_answering``), naming the hash.
        """
        version = Version.of(spec)
        key = self.object_key(version.hash)
        with s3_answering(
            STORE_KIND, f"Version {version.hash} cannot be published", self.location, key
        ):
            return self._publish(spec, version, key)

    def _publish(self, spec: AgentSpec | WorkflowSpec, version: Version, key: str) -> Version:
        from botocore.exceptions import ClientError

        for attempt in range(CONFLICT_ATTEMPTS):
            try:
                self._s3().put_object(
                    Bucket=self.location.bucket,
                    Key=key,
                    Body=version.to_json().encode(),
                    ContentType="application/json",
                    IfNoneMatch="*",
                )
                return version
            except ClientError as err:
                status = s3_status(err)
                if status == 412:  # stored already: the first publisher's Version wins
                    try:
                        return self.get(version.hash)
                    except StoreDamaged:
                        return self._repair(spec, key)
                # 409: another conditional write of it is under way, and may yet fail:
                # try again rather than read a Version that may never be there.
                if status != 409:
                    raise
                time.sleep(conflict_delay(attempt))
        what = f"Version {version.hash} cannot be published"
        raise store_conflict(STORE_KIND, what, self.location, key, CONFLICT_ATTEMPTS)

    def _repair(self, spec: AgentSpec | WorkflowSpec, key: str) -> Version:
        """Write ``spec`` anew over its damaged object, unconditionally, with the time it
        was first published (``repaired``)."""
        response = self._s3().get_object(Bucket=self.location.bucket, Key=key)
        with response["Body"] as body:
            damaged = body.read()
        version = repaired(spec, damaged, response["LastModified"])
        self._s3().put_object(
            Bucket=self.location.bucket,
            Key=key,
            Body=version.to_json().encode(),
            ContentType="application/json",
        )
        return version

    def get(self, version_hash: str) -> Version:
        """The stored Version with this hash, re-verified on read.

        Raises:
            NotFound: nothing is stored under this hash.
            StoreDamaged: the stored document does not read back as written.
            StoreUnavailable: S3 did not answer (``s3_answering``), naming the hash.
        """
        from botocore.exceptions import ClientError

        key = self.object_key(version_hash)
        try:
            with s3_answering(
                STORE_KIND, f"Version {version_hash} cannot be read", self.location, key
            ):
                response = self._s3().get_object(Bucket=self.location.bucket, Key=key)
                with response["Body"] as body:
                    document = body.read()
        except ClientError as err:
            if s3_error_code(err) in ("NoSuchKey", "404"):
                # Shown to API callers as is: it names no path of the store.
                raise NotFound(f"no Version {version_hash}") from None
            raise
        return stored_version(document, version_hash)

    def hashes(self) -> list[str]:
        """The hash of every stored Version, sorted (read off the object names).

        Raises:
            StoreUnavailable: S3 did not answer (``s3_answering``).
        """
        start = self.location.prefix + VERSIONS_PREFIX
        found: list[str] = []
        with s3_answering(STORE_KIND, "the Versions cannot be listed", self.location, start):
            pages = self._s3().get_paginator("list_objects_v2")
            for page in pages.paginate(Bucket=self.location.bucket, Prefix=start):
                for item in page.get("Contents", []):
                    name = str(item["Key"])[len(start) :]
                    digest = name.removesuffix(".json")
                    if name.endswith(".json") and is_digest(digest):
                        found.append(f"sha256:{digest}")
        return sorted(found)

    def close(self) -> None:
        """Close the client's connections (a later call opens a new client)."""
        with self._opening:
            client, self._client = self._client, None
        if client is not None:
            client.close()


def _client(location: S3Location) -> Any:
    # Imported here: botocore takes about a second to import, which no process without an
    # S3 store should pay.
    import botocore.session
    from botocore.config import Config

    session = botocore.session.get_session()
    config = Config(**configured_options(location, session))
    return session.create_client(
        "s3", endpoint_url=location.endpoint, region_name=location.region, config=config
    )
