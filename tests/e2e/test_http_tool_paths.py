"""HTTP tools end to end: what an argument may put in the path of a tool's URL, and the
definition the model is sent."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from psych_runtime.specs import AgentBuilder, ValidationFailed
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus

from ._http_server import CountingServer
from .conftest import Harness

pytestmark = pytest.mark.e2e


@pytest.fixture
def api() -> Iterator[CountingServer]:
    server = CountingServer(respond=lambda seen: (200, json.dumps({"path": seen.path}))).start()
    yield server
    server.stop()


def _order_tool(builder: AgentBuilder, base_url: str) -> AgentBuilder:
    return builder.http_tool(
        "order_action",
        description="Act on one order.",
        url=base_url + "/v1/orders/{order_id}/{action}",
        method="GET",
        input_schema={
            "type": "object",
            "properties": {"order_id": {"type": "string"}, "action": {"type": "string"}},
            "required": ["order_id", "action"],
        },
    )


@pytest.mark.parametrize("order_id", ["..", ".", ""])
async def test_an_argument_cannot_leave_the_path_the_template_fixed(
    harness: Harness, api: CountingServer, order_id: str
) -> None:
    # `/v1/orders/../admin` is `/v1/admin` once dot segments are removed (RFC 3986, and
    # httpx does it before sending), and `/v1/orders//admin` names another resource: an
    # argument filling a whole path segment with "..", "." or nothing would choose a path
    # the tool's template never allowed.
    spec = _order_tool(AgentBuilder("paths").model("fake-model"), api.url).build()
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("order_action", {"order_id": order_id, "action": "admin"})),
        Reply.text("done"),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED
    assert api.seen == []  # nothing was sent
    (call,) = report.tool_calls
    assert call.status == "error"
    assert call.result == (
        f"order_action: argument 'order_id' is {order_id!r}, which cannot fill a whole "
        "segment of its URL's path (it would address another resource)"
    )


async def test_path_arguments_are_percent_encoded(harness: Harness, api: CountingServer) -> None:
    spec = _order_tool(AgentBuilder("paths").model("fake-model"), api.url).build()
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("order_action", {"order_id": "../a b/?#%", "action": "..x"})),
        Reply.text("done"),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED
    assert [seen.path for seen in api.seen] == ["/v1/orders/..%2Fa%20b%2F%3F%23%25/..x"]


async def test_a_schema_without_a_type_is_sent_as_an_object(
    harness: Harness, api: CountingServer
) -> None:
    # Validation reads an input_schema without "type" as an object; the model was sent it
    # as written, which OpenAI refuses ("schema must be a JSON Schema of 'type: object'"):
    # every Run of such a Spec failed on its first model call.
    spec = (
        AgentBuilder("typeless")
        .model("fake-model")
        .http_tool(
            "get_order",
            description="Get an order.",
            url=api.url + "/orders/{order_id}",
            method="GET",
            input_schema={"properties": {"order_id": {"type": "string"}}},
        )
        .build()
    )
    harness.fake.enqueue(Reply.text("done"))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED
    (tool,) = [t for t in harness.fake.requests[0]["tools"] if t["function"]["name"] == "get_order"]
    assert tool["function"]["parameters"] == {
        "type": "object",
        "properties": {"order_id": {"type": "string"}},
    }


async def test_a_host_header_is_refused_at_publish_and_dispatch(
    harness: Harness, api: CountingServer
) -> None:
    # The egress policy judges the URL's host; a literal Host header was sent as written,
    # addressing another site behind the same server (a shared ingress routes by it).
    spec = (
        AgentBuilder("steered")
        .model("fake-model")
        .http_tool(
            "get_status",
            description="Get the status.",
            url=api.url + "/status",
            method="GET",
            headers={"Host": "admin.internal.test"},
        )
        .build()
    )
    said = r"tools\[get_status\]\.headers\[Host\]: a literal Host header is refused"
    with pytest.raises(ValidationFailed, match=said):
        harness.client.publish(spec)
    async with harness.worker():
        with pytest.raises(ValidationFailed, match=said):
            await harness.client.dispatch(spec, "go", scope=harness.scope)
    assert api.seen == []


async def test_a_placeholder_in_the_fragment_is_refused_at_publish(
    harness: Harness, api: CountingServer
) -> None:
    # A client never sends a URL's fragment: the argument filling `{section}` was taken
    # out of the query (it fills a placeholder) and then dropped with the fragment, and
    # the call went out without it, answered "ok".
    spec = (
        AgentBuilder("fragment")
        .model("fake-model")
        .http_tool(
            "get_doc",
            description="Get a document's section.",
            url=api.url + "/docs/{doc}#{section}",
            method="GET",
            input_schema={
                "type": "object",
                "properties": {"doc": {"type": "string"}, "section": {"type": "string"}},
            },
        )
        .build()
    )
    said = (
        r"tools\[get_doc\]\.url: placeholder \{section\} is in the fragment \(after '#'\), "
        r"which is never sent"
    )
    with pytest.raises(ValidationFailed, match=said):
        harness.client.publish(spec)
    async with harness.worker():
        with pytest.raises(ValidationFailed, match=said):
            await harness.client.dispatch(spec, "go", scope=harness.scope)
    assert api.seen == []
