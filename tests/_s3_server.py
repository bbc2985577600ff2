"""A real S3-compatible server on loopback for tests: moto's server mode in its own process.

``s3_server()`` starts moto's S3 application (``_moto_serial.py``: one request at a time,
so a conditional write is atomic as on S3) on a free loopback port, waits until it answers, and
stops it by its pid on leaving. ``S3_ENV`` is the environment an S3 client needs to talk
to it and to nothing else: fixed test credentials (moto accepts any), no shared AWS files,
and no instance-metadata lookups (botocore would otherwise try a link-local address when
it finds no credentials).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from tests._ports import free_port

if TYPE_CHECKING:
    from types_aiobotocore_s3.client import S3Client

REGION = "us-east-1"
S3_ENV = {
    "AWS_ACCESS_KEY_ID": "psych-test-key",
    "AWS_SECRET_ACCESS_KEY": "psych-test-secret",
    "AWS_REGION": REGION,
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "AWS_EC2_METADATA_DISABLED": "true",
}
STARTS_WITHIN = 60.0


@dataclass(frozen=True)
class S3Server:
    """A running moto server."""

    endpoint: str
    """``http://127.0.0.1:<port>``."""
    pid: int

    def url(self, bucket: str, prefix: str = "") -> str:
        """The ``PSYCH_BLOB_URL`` of ``bucket``/``prefix`` on this server."""
        path = f"/{prefix}" if prefix else ""
        return f"s3://{bucket}{path}?endpoint={self.endpoint}&region={REGION}"

    @asynccontextmanager
    async def client(self) -> AsyncIterator[S3Client]:
        """A plain S3 client of this server, for a test to look behind a store's back."""
        from aiobotocore.session import get_session

        async with get_session().create_client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=S3_ENV["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=S3_ENV["AWS_SECRET_ACCESS_KEY"],
        ) as client:
            yield client

    async def new_bucket(self, *, versioned: bool = True) -> str:
        """Create a bucket with a fresh name (versioned: every rewrite leaves a version)."""
        bucket = f"psych-{uuid.uuid4().hex[:16]}"
        async with self.client() as s3:
            await s3.create_bucket(Bucket=bucket)
            if versioned:
                await s3.put_bucket_versioning(
                    Bucket=bucket, VersioningConfiguration={"Status": "Enabled"}
                )
        return bucket


@asynccontextmanager
async def s3_server() -> AsyncIterator[S3Server]:
    """Start moto's S3 server on loopback; stop it (by its pid) on leaving."""
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(Path(__file__).with_name("_moto_serial.py")),
        "127.0.0.1",
        str(port),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    server = S3Server(endpoint=f"http://127.0.0.1:{port}", pid=proc.pid)
    try:
        await _wait_until_up(server, proc)
        yield server
    finally:
        if proc.returncode is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), timeout=10)
            except TimeoutError:
                os.kill(proc.pid, signal.SIGKILL)
                await proc.wait()


async def _wait_until_up(server: S3Server, proc: asyncio.subprocess.Process) -> None:
    deadline = time.monotonic() + STARTS_WITHIN
    async with httpx.AsyncClient() as http:
        while True:
            if proc.returncode is not None:
                raise RuntimeError(f"moto server exited with status {proc.returncode}")
            try:
                await http.get(f"{server.endpoint}/moto-api/", timeout=2)
                return
            except httpx.TransportError as err:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"moto server did not answer within {STARTS_WITHIN:g} s"
                    ) from err
            await asyncio.sleep(0.2)


async def object_versions(server: S3Server, bucket: str, key: str) -> list[dict[str, Any]]:
    """Every stored version of ``key`` (a rewrite adds one to a versioned bucket)."""
    async with server.client() as s3:
        listed = await s3.list_object_versions(Bucket=bucket, Prefix=key)
    return [dict(v) for v in listed.get("Versions", []) if v.get("Key") == key]
