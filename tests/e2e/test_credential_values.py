"""A SecretResolver answering nothing usable (None, an empty string) for a credential: the
call is not sent with a bogus ``Authorization`` header, and says which credential is not
available, on a real dev server with a real worker, HTTP and MCP servers on loopback."""

from __future__ import annotations

import dataclasses
from typing import Literal

import pytest

from psych_runtime.activities.secrets import StaticSecretResolver
from psych_runtime.specs import AgentBuilder, RunFailed, Scope
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus
from tests._upstream import Answer, Upstream
from tests.mcp.fixture import McpTestServer

from .conftest import Harness

pytestmark = pytest.mark.e2e


class _Lookup:
    """A resolver written the usual Python way: a lookup that answers None when unset."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    async def resolve(self, scope: Scope, name: str) -> str:
        return self.values.get(name)  # type: ignore[return-value]  # the mistake under test


@pytest.mark.parametrize("answer", ["none", "empty"])
async def test_an_http_tool_whose_credential_resolves_to_nothing_is_not_sent(
    answer: Literal["none", "empty"], harness: Harness
) -> None:
    resolver = _Lookup({}) if answer == "none" else StaticSecretResolver({"orders-key": ""})
    harness.settings = dataclasses.replace(harness.settings, secrets=resolver)
    with Upstream(lambda request: Answer(200, '{"ok": true}')) as orders:
        spec = (
            AgentBuilder("keyless")
            .model("fake-model")
            .http_tool(
                "lookup",
                description="Look an order up.",
                url=orders.url + "/orders/{id}",
                method="GET",
                input_schema={"type": "object", "properties": {"id": {"type": "string"}}},
                credential="orders-key",
            )
            .build()
        )
        harness.fake.enqueue(Reply.tool_calls(ToolCall("lookup", {"id": "7"})), Reply.text("ok"))
        async with harness.worker():
            run = await harness.client.dispatch(spec, "look", scope=harness.scope)
            result = await harness.client.result(run, scope=harness.scope)
            report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    assert [r.headers.get("authorization") for r in orders.requests] == []
    (call,) = report.tool_calls
    assert (call.status, call.result) == (
        "error",
        "lookup: credential 'orders-key' is not available",
    )


async def test_an_mcp_server_whose_credential_resolves_to_nothing_is_not_reached(
    harness: Harness, mcp_http_server: McpTestServer
) -> None:
    harness.settings = dataclasses.replace(harness.settings, secrets=_Lookup({}))
    spec = (
        AgentBuilder("keyless_mcp")
        .model("fake-model")
        .mcp_server("tools", mcp_http_server.url, transport="http", credential="tools-key")
        .build()
    )
    harness.fake.enqueue(Reply.text("ok"))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "look", scope=harness.scope)
        with pytest.raises(RunFailed, match="credential 'tools-key' is not available"):
            await harness.client.result(run, scope=harness.scope)
    assert mcp_http_server.bearers() == {}
