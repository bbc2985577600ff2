"""What the S3 stores (blobs, tokens, Versions) raise when S3 does not answer: a
connection refused, a throttled request (``SlowDown``), a failing server (5xx) is
``StoreUnavailable`` (transient), naming what was asked and the store's kind, never the
endpoint (logged instead); a refusal (``AccessDenied``, a credential refused,
``NoSuchBucket``) is the botocore error it is. botocore's retries come first, as many as
its own ``AWS_MAX_ATTEMPTS`` says (5 when unset).

Against a loopback port nothing listens on, a loopback server that answers every request
with one S3 error, and moto's S3 server.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest
from botocore.exceptions import ClientError

from psych_runtime.activities.blobs import S3BlobStore, S3Location, blob_ref
from psych_runtime.activities.tokens import S3TokenStore, TokenKey
from psych_runtime.activities.versions import S3VersionStore
from psych_runtime.specs import AgentBuilder, StoreUnavailable
from tests._ports import free_port
from tests._s3_server import REGION, S3_ENV, S3Server, s3_server

REF = blob_ref(b"x")
KEY = TokenKey("acme", None, "https://auth.example.test", "client-1", "https://mcp.test/mcp")
VERSION = "sha256:" + "ab" * 32
BUCKET = "psych-bucket"


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in S3_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_MAX_ATTEMPTS", raising=False)


@dataclass(frozen=True)
class Kind:
    """One S3 store: how its read is asked, and how a failed read names what it asked."""

    name: str
    read: Callable[[S3Location], Awaitable[object]]
    what: str


async def _blob(where: S3Location) -> object:
    async with S3BlobStore(where) as store:
        return await store.get(REF)


async def _token(where: S3Location) -> object:
    store = S3TokenStore(where)
    try:
        return await store.get(KEY)
    finally:
        await store.aclose()


async def _version(where: S3Location) -> object:
    store = S3VersionStore(where)
    try:
        # The store's client is synchronous: in a thread, so the loop's servers answer.
        return await asyncio.to_thread(store.get, VERSION)
    finally:
        store.close()


KINDS = [
    Kind("S3 blob store", _blob, f"blob {REF} cannot be read"),
    Kind("S3 token store", _token, f"the token record {KEY!r} cannot be read"),
    Kind("S3 version store", _version, f"Version {VERSION} cannot be read"),
]


@dataclass
class Answering:
    """A loopback server answering every request with one status and S3 error code."""

    endpoint: str
    requests: int = 0


@asynccontextmanager
async def answering(status: int, code: str) -> AsyncIterator[Answering]:
    port = free_port()
    server = Answering(f"http://127.0.0.1:{port}")
    body = (
        f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
        f"<Message>{code} (scripted)</Message><RequestId>r1</RequestId></Error>"
    ).encode()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        fields: dict[str, str] = {}
        for line in head.decode("latin-1").split("\r\n")[1:]:
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
        if fields.get("expect", "").lower() == "100-continue":  # an upload waits for it
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        if int(fields.get("content-length") or 0):
            await reader.readexactly(int(fields["content-length"]))
        server.requests += 1
        writer.write(
            f"HTTP/1.1 {status} Scripted\r\nContent-Type: application/xml\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        writer.close()

    listening = await asyncio.start_server(answer, "127.0.0.1", port)
    try:
        yield server
    finally:
        listening.close()
        await listening.wait_closed()


def at(endpoint: str) -> S3Location:
    return S3Location(bucket=BUCKET, endpoint=endpoint, region=REGION)


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
async def test_a_refused_connection_is_unavailable_naming_what_not_where(
    kind: Kind, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Before: botocore's EndpointConnectionError, "Could not connect to the endpoint URL:
    # "http://127.0.0.1:<port>/<bucket>/<key>"", which an activity failed with as is.
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with caplog.at_level(logging.WARNING), pytest.raises(StoreUnavailable) as caught:
        await kind.read(at(endpoint))
    assert str(caught.value) == (
        f"{kind.what}: the {kind.name} did not answer (connection failed: EndpointConnectionError)"
    )
    assert caught.value.__cause__ is None  # botocore's words name the endpoint
    assert endpoint in caught.value.detail  # for the log of the process that asked
    logged = [r.getMessage() for r in caplog.records if "did not answer at" in r.getMessage()]
    assert len(logged) == 1 and endpoint in logged[0] and BUCKET in logged[0], logged


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
@pytest.mark.parametrize(
    ("status", "code", "how"),
    [
        (503, "SlowDown", "throttled: SlowDown, HTTP 503"),
        (500, "InternalError", "server error: InternalError, HTTP 500"),
    ],
)
async def test_throttled_or_failing_s3_is_unavailable_after_botocores_attempts(
    kind: Kind, status: int, code: str, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")  # botocore's own setting, honoured
    async with answering(status, code) as server:
        with pytest.raises(StoreUnavailable) as caught:
            await kind.read(at(server.endpoint))
    assert str(caught.value) == f"{kind.what}: the {kind.name} did not answer ({how})"
    assert server.requests == 2


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
@pytest.mark.parametrize(("status", "code"), [(403, "AccessDenied"), (403, "InvalidAccessKeyId")])
async def test_a_refusal_is_the_botocore_error_it_is_asked_once(
    kind: Kind, status: int, code: str
) -> None:
    async with answering(status, code) as server:
        with pytest.raises(ClientError) as caught:
            await kind.read(at(server.endpoint))
    assert not isinstance(caught.value, StoreUnavailable)
    assert caught.value.response["Error"]["Code"] == code
    assert server.requests == 1  # no retry mends it


@pytest.fixture(scope="module")
async def s3() -> AsyncIterator[S3Server]:
    async with s3_server() as server:
        yield server


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
async def test_a_missing_bucket_is_a_refusal_not_an_outage(kind: Kind, s3: S3Server) -> None:
    with pytest.raises(ClientError) as caught:
        await kind.read(S3Location(bucket="no-such-bucket-here", endpoint=s3.endpoint))
    assert caught.value.response["Error"]["Code"] == "NoSuchBucket"


async def _put_blob(where: S3Location) -> object:
    async with S3BlobStore(where) as store:
        return await store.put(b"x")


async def _publish(where: S3Location) -> object:
    store = S3VersionStore(where)
    try:
        spec = AgentBuilder("greeter").model("fake-model").build()
        return await asyncio.to_thread(store.publish, spec)
    finally:
        store.close()


@pytest.mark.parametrize(
    ("write", "what"),
    [
        (_put_blob, f"blob {REF} cannot be stored: the S3 blob store"),
        (_publish, "Version sha256:[0-9a-f]{64} cannot be published: the S3 version store"),
    ],
    ids=["blob", "version"],
)
async def test_a_write_that_stays_in_conflict_is_unavailable_naming_what_not_where(
    write: Callable[[S3Location], Awaitable[object]],
    what: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Before: PsychError("blob sha256:...: s3://psych-bucket/<key> stayed in conflict for 5
    # conditional writes"): the bucket, which a model call's failure carried into the Run.
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    async with answering(409, "ConditionalRequestConflict") as server:
        with caplog.at_level(logging.WARNING), pytest.raises(StoreUnavailable) as caught:
            await write(at(server.endpoint))
    said = str(caught.value)
    assert re.fullmatch(
        re.escape(what).replace(re.escape("[0-9a-f]{64}"), "[0-9a-f]{64}")
        + re.escape(" stayed in conflict (5 conditional writes answered 409)"),
        said,
    ), said
    assert server.requests == 5
    assert BUCKET not in said and server.endpoint not in said
    assert f"s3://{BUCKET}/" in caught.value.detail
    logged = [r.getMessage() for r in caplog.records if "stayed in conflict at" in r.getMessage()]
    assert len(logged) == 1 and BUCKET in logged[0] and server.endpoint in logged[0], logged
