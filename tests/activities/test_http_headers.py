"""What an HTTP tool's headers can hold: literal headers checked at publish, a credential's
value checked before anything is sent; against a real loopback server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from psych_runtime.activities.blobs import LocalBlobStore
from psych_runtime.activities.secrets import StaticSecretResolver
from psych_runtime.activities.tools import ToolActivities
from psych_runtime.specs import AgentSpec, HttpTool, ModelRef, Problem, ToolRegistry, validate
from tests._upstream import Answer, Request, Upstream
from tests.activities.test_tools import http_call


def echoed(request: Request) -> Answer:
    return Answer(200, "{}")


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with Upstream(echoed) as server:
        yield server


def tool(url: str, **fields: Any) -> HttpTool:
    return HttpTool(name="t", description="d", url=url + "/x", method="POST", **fields)


def problems(http_tool: HttpTool) -> list[Problem]:
    spec = AgentSpec(name="a", model=ModelRef(model="m"), tools=[http_tool])
    return [p for p in validate(spec) if p.path.startswith("tools[t].headers")]


@pytest.mark.parametrize(
    ("headers", "said"),
    [
        ({"X-Trace": "a\r\nX-Injected: 1"}, "line break"),
        ({"X-Trace": "a\nb"}, "line break"),
        ({"X-Region": "Zürich"}, "non-ASCII"),
        ({"X Trace": "1"}, "not a header name"),
        ({"X-Trace:": "1"}, "not a header name"),
        ({"": "1"}, "not a header name"),
        ({"Content-Length": "5"}, "sets it from each request's body"),
        ({"Transfer-Encoding": "chunked"}, "frames each request's body"),
        ({"host": "admin.internal.test"}, "egress policy judges the URL's host"),
    ],
)
async def test_a_header_no_request_can_carry_as_written_is_refused_at_publish(
    headers: dict[str, str], said: str, upstream: Upstream, blobs: LocalBlobStore
) -> None:
    http_tool = tool(upstream.url, headers=headers)
    [problem] = problems(http_tool)
    assert problem.path == f"tools[t].headers[{next(iter(headers))}]"
    assert said in problem.message
    # What publishing it would have let through: a call that cannot go out as written
    # (every call fails), or one that goes out framed twice or to another site.
    activities = ToolActivities(registry=ToolRegistry(), blobs=blobs)
    try:
        outcome = await ActivityEnvironment().run(activities.http, http_call(http_tool, a=1))
    finally:
        await activities.aclose()
    if outcome.status == "ok":
        [request] = upstream.requests
        assert {name.lower() for name in headers} <= set(request.headers)


async def test_headers_a_request_carries_pass_and_are_sent_as_written(
    upstream: Upstream, blobs: LocalBlobStore
) -> None:
    headers = {
        "X-Trace": "a b\tc",
        "Content-Type": "application/vnd.api+json",
        "Accept": "application/json; q=0.9, */*",
        "X-Odd_Name.~": "!#$%&'*+-.^_`|~",
    }
    http_tool = tool(upstream.url, headers=headers)
    assert problems(http_tool) == []
    activities = ToolActivities(registry=ToolRegistry(), blobs=blobs)
    try:
        outcome = await ActivityEnvironment().run(activities.http, http_call(http_tool, a=1))
    finally:
        await activities.aclose()
    assert outcome.status == "ok", outcome.content
    [request] = upstream.requests
    for name, value in headers.items():
        assert request.headers[name.lower()] == value


@pytest.mark.parametrize("secret", ["tok-123\n", "tok-123\r\n", "tök-123", "tok\x01123"])
async def test_a_credential_a_header_cannot_carry_is_refused_unsent_and_unshown(
    secret: str, upstream: Upstream, blobs: LocalBlobStore
) -> None:
    # A secret read from a file often ends in a newline; sent, the HTTP layer failed with
    # an error quoting the header's bytes (a form redaction may not know) or a bare
    # UnicodeEncodeError naming no credential, after the request counted as sent.
    activities = ToolActivities(
        registry=ToolRegistry(),
        blobs=blobs,
        secrets=StaticSecretResolver({"payments-api-key": secret}),
    )
    http_tool = tool(upstream.url, credential="payments-api-key")
    try:
        outcome = await ActivityEnvironment().run(activities.http, http_call(http_tool, a=1))
    finally:
        await activities.aclose()
    assert outcome.status == "error"
    assert outcome.content == (
        "t: credential 'payments-api-key' cannot be sent: its value has a character an HTTP "
        "header cannot carry (a line break, such as a trailing newline, another control "
        "character, or non-ASCII text); nothing was sent"
    )
    assert upstream.requests == []
