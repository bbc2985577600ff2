"""The A2A catalogue on an S3 version store (moto on loopback, behind a relay that answers
chosen reads 503 SlowDown): a Version S3 did not answer for is not taken for a damaged one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import httpx
import pytest

from psych_runtime.activities.versions import S3VersionStore
from psych_runtime.specs import AgentBuilder, StoreUnavailable
from psych_runtime.workers.serve.a2a import AgentCatalogue
from tests._ports import free_port
from tests._s3_server import REGION, S3_ENV, s3_server

_SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message><RequestId>r1</RequestId></Error>"
)
_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length"}


@asynccontextmanager
async def slowing_down(target: str, refused: Callable[[str], bool]) -> AsyncIterator[str]:
    """A loopback HTTP relay to ``target`` (its ``http://127.0.0.1:<port>``) that answers
    503 ``SlowDown`` to each GET whose path ``refused`` picks; the rest is relayed."""
    port = free_port()
    relays: set[asyncio.Task[None]] = set()
    async with httpx.AsyncClient() as http:

        async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            relays.add(task)
            try:
                while head := await reader.readuntil(b"\r\n\r\n"):
                    line, *lines = head.decode("latin-1").rstrip("\r\n").split("\r\n")
                    method, path, _ = line.split(" ", 2)
                    pairs = (x.split(":", 1) for x in lines)
                    headers = [(k.strip(), v.strip()) for k, v in pairs]
                    size = sum(int(v) for k, v in headers if k.lower() == "content-length")
                    body = await reader.readexactly(size)
                    if method == "GET" and refused(path):
                        status, said, content = (
                            503,
                            [("Content-Type", "application/xml")],
                            _SLOW_DOWN,
                        )
                    else:
                        answer = await http.request(
                            method, target + path, headers=headers, content=body
                        )
                        status, content = answer.status_code, answer.content
                        said = [(k, v) for k, v in answer.headers.items() if k not in _HOP]
                    lines = [f"HTTP/1.1 {status} Relayed", *(f"{k}: {v}" for k, v in said)]
                    lines.append(f"Content-Length: {len(content)}")
                    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + content)
                    await writer.drain()
            except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
                pass
            finally:
                writer.close()
                relays.discard(task)

        server = await asyncio.start_server(relay, "127.0.0.1", port)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.close()
            for task in list(relays):  # a client's keep-alive connection still open
                task.cancel()
            await asyncio.gather(*relays)
            await server.wait_closed()


async def test_a_version_s3_did_not_answer_for_fails_the_lookup_not_an_older_served(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Until 12-06 the catalogue took StoreUnavailable (a PsychError) for a damaged Version:
    # the agent's older Version was served, and new tasks ran it, while S3 throttled.
    for name, value in {**S3_ENV, "AWS_MAX_ATTEMPTS": "1"}.items():
        monkeypatch.setenv(name, value)
    helper = AgentBuilder("helper").model("fake-model")
    async with s3_server() as s3:
        bucket = await s3.new_bucket(versioned=False)
        direct = S3VersionStore.from_url(s3.url(bucket))
        older = await asyncio.to_thread(direct.publish, helper.build())
        newer = await asyncio.to_thread(direct.publish, helper.description("Newer.").build())
        direct.close()
        assert newer.published_at > older.published_at
        throttled = [newer.hash.partition(":")[2]]
        async with slowing_down(s3.endpoint, lambda path: any(d in path for d in throttled)) as at:
            store = S3VersionStore.from_url(f"s3://{bucket}?endpoint={at}&region={REGION}")
            try:
                catalogue = AgentCatalogue(store, rescan_seconds=0)
                with pytest.raises(StoreUnavailable) as raised:
                    await catalogue.latest("helper")
                assert str(raised.value) == (
                    f"Version {newer.hash} cannot be read: the S3 version store did not "
                    "answer (throttled: SlowDown, HTTP 503)"
                )
                throttled.clear()  # S3 answers again: the next lookup serves the newest
                assert await catalogue.latest("helper") == newer
            finally:
                store.close()
