"""The tool activities, run in Temporal's ActivityEnvironment against real loopback HTTP."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import os
import threading
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from http import HTTPStatus
from typing import Any, Literal
from urllib.parse import parse_qsl, quote, urlsplit

import h11
import pytest
from pydantic import BaseModel, ConfigDict
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from psych_runtime.activities.blobs import (
    BlobNotFound,
    Conversations,
    EncryptedBlobStore,
    LocalBlobStore,
    blob_ref,
)
from psych_runtime.activities.contract import (
    CatalogInput,
    CodeToolCall,
    ErrorType,
    HttpToolCall,
    ReadOutputInput,
    ToolDefinition,
    ToolOutcome,
    slim_code_call,
)
from psych_runtime.activities.secrets import (
    EnvSecretResolver,
    SecretNotFound,
    SecretResolver,
    StaticSecretResolver,
)
from psych_runtime.activities.tools import ToolActivities
from psych_runtime.specs import HttpTool, NotFound, Permits, Scope, StaticPermits, ToolRegistry
from psych_runtime.workers import Key, Keyring, PsychCodec
from tests._ports import free_port
from tests._upstream import Answer, Request, Upstream, echo_headers

SCOPE = Scope(tenant="acme")
SECRET = "s3cr3t-token-value"


# --- a loopback HTTP server that echoes what it received ----------------------------------


class EchoServer:
    """HTTP/1.1 on 127.0.0.1 (asyncio + h11). Records every request; answers by path.

    ``/missing...`` -> 404, ``/slow...`` -> 200 after 2 s, anything else -> 200 with a JSON
    echo of method, path, query, body and headers.
    """

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[Any]] = set()
        self.base_url = ""

    async def __aenter__(self) -> EchoServer:
        self._server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        self.base_url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        connection = h11.Connection(h11.SERVER)
        try:
            while True:
                request: h11.Request | None = None
                body = b""
                while True:
                    event = connection.next_event()
                    if event is h11.NEED_DATA:
                        connection.receive_data(await reader.read(65536))
                    elif isinstance(event, h11.Request):
                        request = event
                    elif isinstance(event, h11.Data):
                        body += event.data
                    elif isinstance(event, h11.EndOfMessage):
                        break
                    else:  # the client closed the connection
                        return
                assert request is not None
                status, payload = await self._answer(request, body)
                headers = [
                    ("content-type", "application/json"),
                    ("content-length", str(len(payload))),
                ]
                reason = HTTPStatus(status).phrase.encode()
                writer.write(
                    connection.send(
                        h11.Response(status_code=status, headers=headers, reason=reason)
                    )
                    or b""
                )
                writer.write(connection.send(h11.Data(data=payload)) or b"")
                writer.write(connection.send(h11.EndOfMessage()) or b"")
                await writer.drain()
                if connection.our_state is h11.MUST_CLOSE:
                    return
                connection.start_next_cycle()
        except (ConnectionError, h11.RemoteProtocolError):
            return
        finally:
            self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await writer.wait_closed()

    async def _answer(self, request: h11.Request, body: bytes) -> tuple[int, bytes]:
        target = urlsplit(request.target.decode())
        record: dict[str, Any] = {
            "method": request.method.decode(),
            "path": target.path,
            "query": [list(pair) for pair in parse_qsl(target.query)],
            "body": json.loads(body) if body else None,
            "headers": {name.decode(): value.decode() for name, value in request.headers},
        }
        self.requests.append(record)
        if target.path.startswith("/missing"):
            return 404, b'{"error": "no such order"}'
        if target.path.startswith("/slow"):
            await asyncio.sleep(2)
        # The echo leaves out Authorization, so a test can check the secret is stored nowhere.
        headers = {k: v for k, v in record["headers"].items() if k != "authorization"}
        return 200, json.dumps({**record, "headers": headers}).encode()


# --- fixtures and tools -------------------------------------------------------------------


class Order(BaseModel):
    order_id: str
    total: float


class SearchArgs(BaseModel):
    """Search orders."""

    model_config = ConfigDict(extra="forbid")
    query: str


def make_registry(cancelled: list[str], started: asyncio.Event) -> ToolRegistry:
    registry = ToolRegistry()

    @registry.register(idempotent=True, local_seconds=2.0)
    def lookup_order(order_id: str) -> dict[str, Any]:
        """Look up an order.

        Args:
            order_id: the order's id.
        """
        if order_id == "missing":
            raise ValueError("order not found")
        return {"order_id": order_id, "thread": threading.current_thread().name, "note": "café"}

    @registry.register
    async def fetch_order(order_id: str) -> Order:
        """Fetch an order asynchronously."""
        await asyncio.sleep(0)
        return Order(order_id=order_id, total=12.5)

    @registry.register
    def big_report(size: int, char: str = "x") -> str:
        """A long report."""
        return char * size

    @registry.register
    def nothing() -> None:
        """Returns nothing."""

    @registry.register
    def slow_sync(seconds: float) -> str:
        """Blocks its thread."""
        time.sleep(seconds)
        return "done"

    @registry.register
    async def wait_forever() -> str:
        """Never finishes by itself."""
        started.set()
        try:
            await asyncio.sleep(60)
        finally:
            cancelled.append("wait_forever")
        return "unreachable"

    registry.register_dynamic("search", SearchArgs, lambda args: [args.query, args.query.upper()])
    return registry


@pytest.fixture
def cancelled() -> list[str]:
    return []


@pytest.fixture
def started() -> asyncio.Event:
    return asyncio.Event()


@pytest.fixture
async def tools(
    blobs: LocalBlobStore, cancelled: list[str], started: asyncio.Event
) -> AsyncIterator[ToolActivities]:
    activities = ToolActivities(
        registry=make_registry(cancelled, started),
        blobs=blobs,
        secrets=StaticSecretResolver({"payments-api-key": SECRET}),
        heartbeat_seconds=0.05,
    )
    yield activities
    await activities.aclose()


@pytest.fixture
async def server() -> AsyncIterator[EchoServer]:
    async with EchoServer() as echo:
        yield echo


@pytest.fixture
def env() -> ActivityEnvironment:
    return ActivityEnvironment()


def code_call(tool: str, large_result_bytes: int = 10_000, **arguments: Any) -> CodeToolCall:
    return CodeToolCall(
        run_id="run-1",
        call_id="call-1",
        tool=tool,
        arguments=arguments,
        large_result_bytes=large_result_bytes,
        scope=SCOPE,
    )


def http_call(tool: HttpTool, large_result_bytes: int = 100_000, **arguments: Any) -> HttpToolCall:
    return HttpToolCall(
        run_id="run-1",
        call_id="call-7",
        tool=tool,
        arguments=arguments,
        large_result_bytes=large_result_bytes,
        scope=SCOPE,
    )


async def shown(blobs: LocalBlobStore, outcome: ToolOutcome) -> str:
    """The tool message the model is shown, read back from the store; checks its shape."""
    message = await Conversations(blobs).get_message(outcome.message_ref)
    assert message.role == "tool"
    assert message.tool_call_id == outcome.call_id
    return message.content


# --- code tools ---------------------------------------------------------------------------


async def test_sync_code_tool_runs_in_a_worker_thread_and_its_message_is_stored(
    tools: ToolActivities, env: ActivityEnvironment, blobs: LocalBlobStore
) -> None:
    outcome = await env.run(tools.code, code_call("lookup_order", order_id="A-1"))

    assert outcome.status == "ok"
    assert not outcome.truncated
    result = json.loads(outcome.content)
    assert result["order_id"] == "A-1"
    assert result["thread"] != threading.current_thread().name
    assert '"note": "café"' in outcome.content  # ensure_ascii=False
    assert outcome.size == len(outcome.content.encode())
    # Shown whole: its message holds it, and the result is not stored apart (its ref is
    # still the one storing it would give, what the repeat guard compares).
    assert outcome.result_ref == blob_ref(outcome.content.encode())
    with pytest.raises(BlobNotFound):
        await blobs.get(outcome.result_ref)
    assert await shown(blobs, outcome) == outcome.content
    assert outcome.latency.duration_ms > 0


async def test_async_code_tool_result_model_is_rendered_as_json(
    tools: ToolActivities, env: ActivityEnvironment
) -> None:
    outcome = await env.run(tools.code, code_call("fetch_order", order_id="B-2"))
    assert outcome.status == "ok"
    assert json.loads(outcome.content) == {"order_id": "B-2", "total": 12.5}


async def test_results_are_rendered_by_type(
    tools: ToolActivities, env: ActivityEnvironment
) -> None:
    assert (await env.run(tools.code, code_call("nothing"))).content == "null"
    text = await env.run(tools.code, code_call("big_report", size=3, char="ab"))
    assert text.content == "ababab"  # a str is taken as is, not JSON-quoted
    searched = await env.run(tools.code, code_call("search", query="tea"))
    assert json.loads(searched.content) == ["tea", "TEA"]


async def test_invalid_arguments_are_an_error_outcome(
    tools: ToolActivities, env: ActivityEnvironment, blobs: LocalBlobStore
) -> None:
    outcome = await env.run(tools.code, code_call("lookup_order"))
    assert outcome.status == "error"
    assert outcome.content == "invalid arguments for lookup_order: order_id: Field required"
    assert await shown(blobs, outcome) == outcome.content

    extra = await env.run(tools.code, code_call("search", query="x", limit=3))
    assert extra.status == "error"
    assert "limit: Extra inputs are not permitted" in extra.content


async def test_exception_raised_by_a_tool_is_an_error_outcome(
    tools: ToolActivities, env: ActivityEnvironment
) -> None:
    outcome = await env.run(tools.code, code_call("lookup_order", order_id="missing"))
    assert outcome.status == "error"
    assert outcome.content == "ValueError: order not found"


async def test_large_result_is_a_preview_with_a_handle_readable_in_slices(
    tools: ToolActivities, env: ActivityEnvironment, blobs: LocalBlobStore
) -> None:
    # Two-byte characters, so a byte cut at 2048 would fall inside one if done naively.
    whole = "é" * 2999 + "END"
    outcome = await env.run(
        tools.code, code_call("big_report", large_result_bytes=4000, size=2999, char="é")
    )
    assert outcome.status == "ok"
    assert outcome.truncated
    assert outcome.size == 2999 * 2
    assert outcome.content == "é" * 1024  # 2048 bytes, cut on a character boundary
    assert (await blobs.get(outcome.result_ref)).decode() == "é" * 2999
    message = await shown(blobs, outcome)
    assert f"The result was {2999 * 2} bytes" in message
    assert f'call read_tool_output with handle "{outcome.result_ref}" and offset 1024' in message
    assert message.endswith("\n\n" + outcome.content)

    # read_tool_output walks the whole stored result by the offsets its headers give.
    chunks: list[str] = []
    offset = 1024
    while True:
        read = await env.run(
            tools.read_output,
            ReadOutputInput(call_id="read-1", handle=outcome.result_ref, offset=offset, length=900),
        )
        assert read.status == "ok"
        assert not read.truncated
        header, _, chunk = read.content.partition("\n")
        assert f"of 2999 ({2999 * 2} bytes)" in header
        chunks.append(chunk)
        if "end of output" in header:
            break
        offset = int(header.rsplit("next offset ", 1)[1].rstrip("]"))
    assert outcome.content + "".join(chunks) == whole[:2999]
    assert len(chunks) == 3  # 1024 + 900 + 900 + 175


async def test_small_large_result_bytes_limits_the_preview(
    tools: ToolActivities, env: ActivityEnvironment
) -> None:
    outcome = await env.run(tools.code, code_call("big_report", large_result_bytes=100, size=101))
    assert outcome.truncated
    assert outcome.content == "x" * 100
    fits = await env.run(tools.code, code_call("big_report", large_result_bytes=100, size=100))
    assert not fits.truncated
    assert fits.content == "x" * 100


async def test_a_result_past_a_payload_is_a_handle_whatever_the_limit(
    tools: ToolActivities, env: ActivityEnvironment
) -> None:
    # Shown whole, a result travels in the outcome, which must fit a Temporal payload:
    # judged as JSON, where a control character (ANSI colours, say) takes six bytes.
    limit = 100_000_000
    plain = await env.run(tools.code, code_call("big_report", limit, size=500_000))
    assert not plain.truncated and plain.size == 500_000
    escaped = await env.run(tools.code, code_call("big_report", limit, size=100_000, char="\x1b"))
    assert escaped.truncated and escaped.size == 100_000
    assert len(escaped.model_dump_json()) < 20_000  # the preview only
    large = await env.run(tools.code, code_call("big_report", limit, size=600_000))
    assert large.truncated and large.size == 600_000


async def test_read_output_of_an_unknown_handle_is_an_error_outcome(
    tools: ToolActivities, env: ActivityEnvironment
) -> None:
    for handle in ("sha256:" + "0" * 64, "not-a-handle"):
        read = await env.run(tools.read_output, ReadOutputInput(call_id="r", handle=handle))
        assert read.status == "error"
        assert read.content == f"no stored tool output with handle {handle!r}"


async def test_read_output_of_a_blob_sealed_under_other_keys_names_it_to_the_model(
    blobs: LocalBlobStore,
) -> None:
    # The cipher's refusal (AccessDenied) escaped read_tool_output: the activity was retried
    # to no avail and the model then read the cipher's words (key id, tenant), not the handle.
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, workflow_id="psych-acme-r1")
    secret = os.urandom(32)
    sealing = PsychCodec(Keyring([Key("acme-1", "acme", secret)], {"acme": "acme-1"}))
    # The same key id with another secret: a worker configured otherwise than the one that
    # stored the output.
    other = PsychCodec(Keyring([Key("acme-1", "acme", os.urandom(32))], {"acme": "acme-1"}))

    async def stored() -> str:
        return await EncryptedBlobStore(blobs, sealing.blob_cipher()).put(b"x" * 5000)

    handle = await env.run(stored)
    reader = ToolActivities(
        registry=ToolRegistry(), blobs=EncryptedBlobStore(blobs, other.blob_cipher())
    )
    try:
        read = await env.run(reader.read_output, ReadOutputInput(call_id="r", handle=handle))
    finally:
        await reader.aclose()
    assert read.status == "error"
    assert read.content == (
        f"the stored tool output {handle} does not open with this worker's keys (it was sealed "
        "under keys this worker does not hold, or altered) and cannot be read"
    )
    assert "acme-1" not in read.content and secret.hex() not in read.content


async def test_unregistered_code_tool_fails_the_activity(
    tools: ToolActivities, env: ActivityEnvironment
) -> None:
    with pytest.raises(ApplicationError) as caught:
        await env.run(tools.code, code_call("no_such_tool"))
    assert caught.value.type == ErrorType.TOOL_NOT_REGISTERED
    assert caught.value.non_retryable


async def test_slow_sync_tool_heartbeats_while_it_runs(
    tools: ToolActivities, env: ActivityEnvironment
) -> None:
    beats: list[float] = []
    env.on_heartbeat = lambda *details: beats.append(time.monotonic())
    outcome = await env.run(tools.code, code_call("slow_sync", seconds=0.4))
    assert outcome.content == "done"
    # Every 0.05 s over 0.4 s: the event loop was free while the thread slept.
    assert len(beats) >= 4


async def test_a_local_call_sends_no_heartbeat(
    tools: ToolActivities, env: ActivityEnvironment
) -> None:
    # A local activity has no heartbeat at the server: each one the SDK is handed is
    # refused and logged ("Activity heartbeat failed ... UnknownActivity") every beat.
    env.info = dataclasses.replace(ActivityEnvironment.default_info(), is_local=True)
    beats: list[float] = []
    env.on_heartbeat = lambda *details: beats.append(time.monotonic())
    outcome = await env.run(tools.code, code_call("slow_sync", seconds=0.3))
    assert outcome.content == "done"
    assert beats == []


async def test_a_local_outcome_over_its_local_bytes_fails_so_it_runs_as_an_activity(
    tools: ToolActivities, env: ActivityEnvironment
) -> None:
    call = code_call("lookup_order", order_id="42")
    fits = slim_code_call(call.model_copy(update={"local_bytes": 10_000}), "elsewhere")
    assert (await env.run(tools.run_code, fits)).status == "ok"
    over = slim_code_call(call.model_copy(update={"local_bytes": 20}), "elsewhere")
    with pytest.raises(ApplicationError) as caught:
        await env.run(tools.run_code, over)
    assert caught.value.type == ErrorType.LOCAL_RESULT_TOO_LARGE
    assert caught.value.non_retryable
    assert "lookup_order" in str(caught.value)


async def test_cancelling_an_async_tool_cancels_it_and_propagates(
    tools: ToolActivities,
    env: ActivityEnvironment,
    cancelled: list[str],
    started: asyncio.Event,
) -> None:
    running = asyncio.ensure_future(env.run(tools.code, code_call("wait_forever")))
    await asyncio.wait_for(started.wait(), 5)
    env.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(running, 5)
    assert cancelled == ["wait_forever"]  # the tool's own cleanup ran


async def test_queue_wait_comes_from_activity_info(
    tools: ToolActivities, env: ActivityEnvironment
) -> None:
    info = ActivityEnvironment.default_info()
    env.info = dataclasses.replace(
        info, started_time=info.current_attempt_scheduled_time + timedelta(milliseconds=250)
    )
    outcome = await env.run(tools.code, code_call("nothing"))
    assert outcome.latency.queue_wait_ms == pytest.approx(250)


# --- HTTP tools ---------------------------------------------------------------------------


async def test_http_get_fills_the_url_template_and_sends_the_rest_as_query(
    tools: ToolActivities, env: ActivityEnvironment, server: EchoServer, blobs: LocalBlobStore
) -> None:
    tool = HttpTool(
        name="get_order",
        description="Get an order.",
        url=server.base_url + "/orders/{order_id}",
        method="GET",
    )
    outcome = await env.run(
        tools.http, http_call(tool, order_id="a/b c", expand="items", limit=5, tags=["x", "y"])
    )
    assert outcome.status == "ok", outcome.content
    [request] = server.requests
    assert request["method"] == "GET"
    assert request["path"] == "/orders/a%2Fb%20c"
    assert request["query"] == [["expand", "items"], ["limit", "5"], ["tags", "x"], ["tags", "y"]]
    assert request["body"] is None
    assert json.loads(outcome.content)["path"] == "/orders/a%2Fb%20c"  # the body, as text
    assert await shown(blobs, outcome) == outcome.content


async def test_http_post_sends_remaining_arguments_as_json_with_literal_headers(
    tools: ToolActivities, env: ActivityEnvironment, server: EchoServer
) -> None:
    tool = HttpTool(
        name="add_note",
        description="Add a note to an order.",
        url=server.base_url + "/orders/{order_id}/notes",
        headers={"X-Client": "psych-tests"},
    )
    outcome = await env.run(
        tools.http, http_call(tool, order_id="A-1", note="ring twice", urgent=True)
    )
    assert outcome.status == "ok", outcome.content
    [request] = server.requests
    assert request["method"] == "POST"
    assert request["path"] == "/orders/A-1/notes"
    assert request["query"] == []
    assert request["body"] == {"note": "ring twice", "urgent": True}
    assert request["headers"]["x-client"] == "psych-tests"
    assert request["headers"]["content-type"] == "application/json"
    assert "authorization" not in request["headers"]


async def test_http_credential_is_resolved_into_a_bearer_header_and_never_stored(
    tools: ToolActivities, env: ActivityEnvironment, server: EchoServer, blobs: LocalBlobStore
) -> None:
    tool = HttpTool(
        name="charge",
        description="Look up a charge.",
        url=server.base_url + "/charges",
        method="GET",
        credential="payments-api-key",
    )
    outcome = await env.run(tools.http, http_call(tool))
    assert outcome.status == "ok", outcome.content
    assert server.requests[0]["headers"]["authorization"] == f"Bearer {SECRET}"
    stored = [path.read_bytes() for path in blobs.root.rglob("*") if path.is_file()]
    assert len(stored) == 1  # the tool message (the result, shown whole, is in it)
    assert not any(SECRET.encode() in data for data in stored)
    assert SECRET not in outcome.model_dump_json()


async def test_http_missing_credential_is_an_error_outcome_and_sends_nothing(
    tools: ToolActivities, env: ActivityEnvironment, server: EchoServer, blobs: LocalBlobStore
) -> None:
    tool = HttpTool(
        name="refund",
        description="Refund.",
        url=server.base_url + "/refunds",
        credential="refunds-key",
    )
    outcome = await env.run(tools.http, http_call(tool))
    assert outcome.status == "error"
    assert "'refunds-key'" in outcome.content
    assert server.requests == []

    no_resolver = ToolActivities(registry=ToolRegistry(), blobs=blobs)
    try:
        outcome = await env.run(no_resolver.http, http_call(tool))
    finally:
        await no_resolver.aclose()
    assert outcome.status == "error"
    assert "no SecretResolver" in outcome.content
    assert server.requests == []


async def test_http_missing_url_argument_is_an_error_outcome(
    tools: ToolActivities, env: ActivityEnvironment, server: EchoServer
) -> None:
    tool = HttpTool(
        name="get_order", description="Get.", url=server.base_url + "/orders/{order_id}"
    )
    outcome = await env.run(tools.http, http_call(tool, other="x"))
    assert outcome.status == "error"
    assert outcome.content == "get_order: missing argument 'order_id' (used in its URL)"
    assert server.requests == []


async def test_http_arguments_making_a_dot_or_empty_path_segment_are_refused(
    tools: ToolActivities, env: ActivityEnvironment, server: EchoServer
) -> None:
    # Percent-encoding leaves dots alone, and "." or ".." as a whole segment is removed
    # with what precedes it before the request is sent (tests/e2e/test_http_tool_paths.py).
    tool = HttpTool(
        name="get_part",
        description="Get.",
        url=server.base_url + "/orders/{a}{b}/parts?q={q}",
        method="GET",
    )
    outcome = await env.run(tools.http, http_call(tool, a=".", b=".", q=".."))
    assert outcome.status == "error"
    assert outcome.content == (
        "get_part: arguments 'a', 'b' make '..', which cannot fill a whole segment of its "
        "URL's path (it would address another resource)"
    )
    assert server.requests == []
    # In the query, or within a segment, dots are data.
    outcome = await env.run(tools.http, http_call(tool, a=".", b="..", q=".."))
    assert outcome.status == "ok", outcome.content
    assert [(r["path"], r["query"]) for r in server.requests] == [
        ("/orders/.../parts", [["q", ".."]])
    ]


async def test_http_url_whose_host_an_argument_fills_is_refused_before_sending(
    tools: ToolActivities, env: ActivityEnvironment, server: EchoServer
) -> None:
    # Validation refuses such a URL; a Version stored before it did is refused at the call.
    tool = HttpTool(name="fetch", description="Fetch.", url="http://{host}/orders")
    outcome = await env.run(tools.http, http_call(tool, host=server.base_url[7:]))
    assert outcome.status == "error"
    assert outcome.content == (
        "fetch: its URL puts {host} in the scheme, host or port; arguments may fill the "
        "path and the query only"
    )
    suffix = HttpTool(name="fetch", description="Fetch.", url="http://127.0.0.1{/suffix}")
    arguments: dict[str, Any] = {"/suffix": ".evil.example"}
    outcome = await env.run(tools.http, http_call(suffix, **arguments))
    assert outcome.status == "error" and "{/suffix} in the scheme, host or port" in outcome.content
    assert server.requests == []


async def test_http_error_status_is_an_error_outcome(
    tools: ToolActivities, env: ActivityEnvironment, server: EchoServer
) -> None:
    tool = HttpTool(
        name="get_order", description="Get.", url=server.base_url + "/missing/1", method="GET"
    )
    outcome = await env.run(tools.http, http_call(tool))
    assert outcome.status == "error"
    assert outcome.content == 'HTTP 404 Not Found: {"error": "no such order"}'
    assert len(server.requests) == 1


async def test_http_timeout_is_an_error_outcome_and_heartbeats_meanwhile(
    tools: ToolActivities, env: ActivityEnvironment, server: EchoServer
) -> None:
    beats: list[object] = []
    env.on_heartbeat = lambda *details: beats.append(details)
    tool = HttpTool(
        name="slow",
        description="Slow.",
        url=server.base_url + "/slow",
        method="GET",
        timeout_seconds=0.3,
    )
    begun = time.monotonic()
    outcome = await env.run(tools.http, http_call(tool))
    assert time.monotonic() - begun < 1.5
    assert outcome.status == "error"
    assert "timed out after 0.3 s" in outcome.content
    assert len(server.requests) == 1
    assert len(beats) >= 3


async def test_http_connection_refused_is_an_error_outcome(
    tools: ToolActivities, env: ActivityEnvironment
) -> None:
    port = free_port()  # nothing listens on it
    tool = HttpTool(name="down", description="Down.", url=f"http://127.0.0.1:{port}/x")
    outcome = await env.run(tools.http, http_call(tool))
    assert outcome.status == "error"
    assert "ConnectError" in outcome.content


async def test_large_http_response_is_truncated_too(
    tools: ToolActivities, env: ActivityEnvironment, server: EchoServer
) -> None:
    tool = HttpTool(name="echo", description="Echo.", url=server.base_url + "/echo")
    outcome = await env.run(tools.http, http_call(tool, large_result_bytes=64, pad="p" * 500))
    assert outcome.truncated
    assert len(outcome.content) == 64
    assert outcome.size > 500


# --- catalog ------------------------------------------------------------------------------


async def test_catalog_stores_sorted_definitions_and_flags_what_is_safe_to_repeat(
    tools: ToolActivities, env: ActivityEnvironment, blobs: LocalBlobStore
) -> None:
    builtin = ToolDefinition(
        name="read_tool_output",
        description="Read a stored result.",
        parameters={"type": "object", "properties": {"handle": {"type": "string"}}},
    )
    get_tool = HttpTool(
        name="get_order",
        description="Get an order.",
        url="http://example.invalid/orders/{order_id}",
        method="GET",
        input_schema={"type": "object", "properties": {"order_id": {"type": "string"}}},
    )
    post_tool = HttpTool(name="add_note", description="Add a note.", url="http://example.invalid")
    catalog = await env.run(
        tools.catalog,
        CatalogInput(
            run_id="run-1",
            code_tools=("search", "lookup_order"),
            http_tools=(get_tool, post_tool),
            builtins=(builtin,),
        ),
    )
    assert {
        entry.name: (entry.kind, entry.safe_to_repeat, entry.local_seconds)
        for entry in catalog.entries
    } == {
        "lookup_order": ("code", True, 2.0),
        "search": ("code", False, None),
        "get_order": ("http", True, None),
        "add_note": ("http", False, None),
        "read_tool_output": ("builtin", True, None),
    }
    assert catalog.tools_ref is not None
    stored = json.loads(await blobs.get(catalog.tools_ref))
    definitions = [ToolDefinition.model_validate(item) for item in stored]
    assert [d.name for d in definitions] == sorted(entry.name for entry in catalog.entries)
    by_name = {d.name: d for d in definitions}
    assert by_name["lookup_order"].description == "Look up an order."
    assert by_name["lookup_order"].parameters["required"] == ["order_id"]
    assert by_name["lookup_order"].parameters["properties"]["order_id"]["description"] == (
        "the order's id."
    )
    assert by_name["search"].description == "Search orders."
    assert by_name["get_order"].parameters == get_tool.input_schema
    assert by_name["add_note"].parameters == {"type": "object", "properties": {}}
    assert by_name["read_tool_output"] == builtin


async def test_empty_catalog_has_no_tools_ref(
    tools: ToolActivities, env: ActivityEnvironment
) -> None:
    catalog = await env.run(tools.catalog, CatalogInput(run_id="run-1"))
    assert catalog.tools_ref is None
    assert catalog.entries == ()


async def test_catalog_with_an_unregistered_code_tool_fails(
    tools: ToolActivities, env: ActivityEnvironment
) -> None:
    with pytest.raises(ApplicationError) as caught:
        await env.run(
            tools.catalog, CatalogInput(run_id="run-1", code_tools=("lookup_order", "ghost"))
        )
    assert caught.value.type == ErrorType.TOOL_NOT_REGISTERED
    assert caught.value.non_retryable
    assert "'ghost'" in caught.value.message
    assert "ToolRegistry" in caught.value.message


async def test_the_catalog_leaves_out_code_and_http_tools_the_tenant_is_not_permitted(
    tools: ToolActivities, env: ActivityEnvironment
) -> None:
    tools.permits = StaticPermits(
        tenants={"acme": Permits(code_tools=("lookup_*",), http_tools=("get_*",))}
    )
    get_tool = HttpTool(name="get_order", description="Get.", url="http://example.invalid")
    post_tool = HttpTool(name="add_note", description="Add.", url="http://example.invalid")
    given = CatalogInput(
        run_id="run-1",
        # "ghost" is not registered: left out, it is not looked up.
        code_tools=("search", "lookup_order", "ghost"),
        http_tools=(get_tool, post_tool),
    )
    # The tenant is read off the Run's workflow id, as the workflow checked it.
    env.info = dataclasses.replace(env.info, workflow_id="psych-acme-run-1")
    catalog = await env.run(tools.catalog, given)
    assert [entry.name for entry in catalog.entries] == ["get_order", "lookup_order"]
    assert catalog.tools_ref is not None
    stored = json.loads(await tools.blobs.get(catalog.tools_ref))
    assert [item["name"] for item in stored] == ["get_order", "lookup_order"]
    # Another tenant, under no entry and no default: everything.
    env.info = dataclasses.replace(env.info, workflow_id="psych-globex-run-1")
    with pytest.raises(ApplicationError, match="'ghost' is not registered"):
        await env.run(tools.catalog, given)


async def test_a_catalog_whose_workflow_id_names_no_tenant_is_refused_under_permits(
    tools: ToolActivities, env: ActivityEnvironment
) -> None:
    tools.permits = StaticPermits(tenants={"acme": Permits(code_tools=())})
    env.info = dataclasses.replace(env.info, workflow_id="by-hand")
    with pytest.raises(ApplicationError) as caught:
        await env.run(tools.catalog, CatalogInput(run_id="run-1", code_tools=("search",)))
    assert caught.value.type == ErrorType.BAD_INPUT
    assert caught.value.non_retryable
    assert "workflow id 'by-hand' is not 'psych-<tenant>-<run id>'" in caught.value.message
    # Without tools to narrow, nothing is asked.
    catalog = await env.run(tools.catalog, CatalogInput(run_id="run-1"))
    assert catalog.entries == ()


# --- secrets ------------------------------------------------------------------------------


async def test_env_secret_resolver_maps_names_to_variables() -> None:
    resolver = EnvSecretResolver({"PSYCH_SECRET_PAYMENTS_API_KEY": SECRET, "PSYCH_SECRET_E": ""})
    assert isinstance(resolver, SecretResolver)
    assert resolver.variable("payments-api-key") == "PSYCH_SECRET_PAYMENTS_API_KEY"
    assert resolver.variable("a.b/c d") == "PSYCH_SECRET_A_B_C_D"
    assert await resolver.resolve(SCOPE, "payments-api-key") == SECRET
    with pytest.raises(SecretNotFound, match="PSYCH_SECRET_OTHER"):
        await resolver.resolve(SCOPE, "other")
    with pytest.raises(NotFound):
        await resolver.resolve(SCOPE, "e")  # empty counts as absent


async def test_static_secret_resolver_never_shows_values() -> None:
    resolver = StaticSecretResolver({"payments-api-key": SECRET})
    assert isinstance(resolver, SecretResolver)
    assert await resolver.resolve(SCOPE, "payments-api-key") == SECRET
    with pytest.raises(SecretNotFound):
        await resolver.resolve(SCOPE, "missing")
    assert SECRET not in repr(resolver)
    assert "payments-api-key" in repr(resolver)


# --- secrets echoed back, and the URL template's own query --------------------------------


@pytest.mark.parametrize("status", [200, 500])
async def test_http_credential_echoed_by_the_server_is_redacted_everywhere(
    tools: ToolActivities, env: ActivityEnvironment, blobs: LocalBlobStore, status: int
) -> None:
    tool = HttpTool(
        name="charge",
        description="Look up a charge.",
        url="/charges",
        method="GET",
        credential="payments-api-key",
    )

    def respond(request: Request) -> Answer:
        # Echoed verbatim, in the Bearer form, percent-encoded and as basic auth's base64.
        token = request.headers["authorization"].removeprefix("Bearer ")
        page = echo_headers(status)(request).body
        assert isinstance(page, str)
        encoded = base64.b64encode(token.encode()).decode()
        return Answer(status, f"{page}\nquoted: {quote(token)} {encoded}", "text/plain")

    with Upstream(respond) as upstream:
        tool = tool.model_copy(update={"url": upstream.url + "/charges"})
        outcome = await env.run(tools.http, http_call(tool))

    assert upstream.requests[0].headers["authorization"] == f"Bearer {SECRET}"
    assert outcome.status == ("ok" if status == 200 else "error")
    assert "authorization: Bearer [REDACTED:payments-api-key]" in outcome.content
    assert outcome.content.count("[REDACTED:payments-api-key]") == 3
    everything = outcome.model_dump_json() + await shown(blobs, outcome)
    stored = b"".join(path.read_bytes() for path in blobs.root.rglob("*") if path.is_file())
    for form in (SECRET, quote(SECRET), base64.b64encode(SECRET.encode()).decode()):
        assert form not in everything
        assert form.encode() not in stored


@pytest.mark.parametrize("method", ["GET", "DELETE"])
async def test_http_url_template_query_is_kept_and_its_keys_are_not_the_models(
    tools: ToolActivities,
    env: ActivityEnvironment,
    server: EchoServer,
    method: Literal["GET", "DELETE"],
) -> None:
    tool = HttpTool(
        name="order",
        description="An order.",
        url=server.base_url + "/orders?expand=items&id={order_id}",
        method=method,
    )

    outcome = await env.run(tools.http, http_call(tool, order_id="4 2", limit=5))

    assert outcome.status == "ok", outcome.content
    [request] = server.requests
    assert request["path"] == "/orders"
    assert request["query"] == [["expand", "items"], ["id", "4 2"], ["limit", "5"]]
    # A key the tool fixed is not the model's to send again: appended, a server reading
    # the last value would take the model's (from an audit).
    refused = await env.run(tools.http, http_call(tool, order_id="7", expand="all"))
    assert refused.status == "error"
    assert "'expand' name query keys its URL fixes" in refused.content
    assert len(server.requests) == 1
