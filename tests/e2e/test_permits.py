"""What each tenant may use (the ``permits:`` section of a worker's settings file) end to
end: real Runs on the dev server, the real test MCP server, the scripted A2A peer, psych's
own worker reading the file, and a client that dispatches with the same permits."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from psych_runtime.specs import (
    AgentBuilder,
    NotPermitted,
    Permits,
    PermitSource,
    PermitsUnavailable,
    PsychError,
    RunFailed,
    Scope,
    SpecError,
    StaticPermits,
    WorkflowBuilder,
)
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers import WorkerSettings, run_worker, tenant_permits
from psych_runtime.workflows import RunStatus
from tests.a2a.peer import serve_peer
from tests.mcp.fixture import McpTestServer

from ._permits import Revoking, checking_client, mail_sender, mailer
from .conftest import Harness

pytestmark = pytest.mark.e2e

GLOBEX = Scope(tenant="globex", principal="tester")


def offered(request: dict[str, Any]) -> list[str]:
    """The tool names one model request offered (but ``read_tool_output``, always there)."""
    names = (tool["function"]["name"] for tool in request.get("tools", []))
    return sorted(name for name in names if name != "read_tool_output")


def permitting(harness: Harness, permits: dict[str, Any]) -> WorkerSettings:
    """The harness's worker settings with a global settings file holding ``permits``."""
    path = harness.home / "settings.yaml"
    path.write_text(json.dumps({"permits": permits}))  # JSON is YAML
    return dataclasses.replace(harness.settings, settings_file=path)


def lookup_order(order_id: str) -> str:
    """Look up an order."""
    return f"order {order_id}: delivered"


def send_email(to: str) -> str:
    """Send an email."""
    return f"sent to {to}"


async def test_a_tenant_permitted_lookup_tools_is_offered_only_those_another_all(
    harness: Harness, mcp_http_server: McpTestServer
) -> None:
    server = mcp_http_server
    settings = permitting(
        harness, {"tenants": {"acme": {"mcp_servers": {server.url: ["lookup*"]}}}}
    )
    spec = (
        AgentBuilder("mcp-agent")
        .model("fake-model")
        .mcp_server("tools", server.url, transport="http")
        .build()
    )
    harness.fake.enqueue(
        # acme's model calls a tool it was not offered: refused, never sent to the server.
        Reply.tool_calls(ToolCall("tools__charge", {"amount": 5})),
        Reply.text("acme done"),
        Reply.tool_calls(ToolCall("tools__echo", {"text": "hi"})),
        Reply.text("globex done"),
    )
    async with run_worker(harness.env.client, settings):
        run = await harness.client.dispatch(spec, "Charge 5", scope=harness.scope)
        acme = await harness.client.result(run, scope=harness.scope)
        acme_report = await harness.client.report(run, scope=harness.scope)
        other = await harness.client.dispatch(spec, "Echo hi", scope=GLOBEX)
        globex = await harness.client.result(other, scope=GLOBEX)
        globex_report = await harness.client.report(other, scope=GLOBEX)
    assert acme.status is RunStatus.COMPLETED, acme.reason
    assert globex.status is RunStatus.COMPLETED, globex.reason
    assert offered(harness.fake.requests[0]) == ["tools__lookup"]
    [charge] = acme_report.tool_calls
    assert charge.status == "error" and "unknown tool 'tools__charge'" in (charge.result or "")
    assert server.calls("charge") == 0
    # The same worker, the same server, another tenant: everything the server lists.
    assert {"tools__charge", "tools__echo", "tools__lookup", "tools__wipe"} <= set(
        offered(harness.fake.requests[2])
    )
    [echo] = globex_report.tool_calls
    assert (echo.status, echo.result) == ("ok", "hi")


async def test_a_peers_skills_are_narrowed_by_the_tenants_permits(harness: Harness) -> None:
    async with serve_peer(("echo", "ask", "wipe")) as peer:
        settings = permitting(harness, {"tenants": {"acme": {"a2a_peers": {peer.url: ["echo"]}}}})
        spec = AgentBuilder("caller").model("fake-model").a2a_peer("helper", peer.url).build()
        harness.fake.enqueue(
            Reply.tool_calls(ToolCall("helper__wipe", {"message": "everything"})),
            Reply.text("acme done"),
            Reply.text("globex done"),
        )
        async with run_worker(harness.env.client, settings):
            run = await harness.client.dispatch(spec, "go", scope=harness.scope)
            acme = await harness.client.result(run, scope=harness.scope)
            report = await harness.client.report(run, scope=harness.scope)
            other = await harness.client.dispatch(spec, "go", scope=GLOBEX)
            globex = await harness.client.result(other, scope=GLOBEX)
    assert acme.status is RunStatus.COMPLETED, acme.reason
    assert globex.status is RunStatus.COMPLETED, globex.reason
    assert offered(harness.fake.requests[0]) == ["helper__echo"]
    [wipe] = report.tool_calls
    assert wipe.status == "error" and "unknown tool" in (wipe.result or "")
    assert peer.texts() == []
    assert offered(harness.fake.requests[2]) == ["helper__ask", "helper__echo", "helper__wipe"]


async def test_a_dispatch_using_an_unpermitted_code_tool_is_refused_naming_it(
    harness: Harness, mcp_http_server: McpTestServer
) -> None:
    settings = permitting(
        harness,
        {
            "tenants": {"acme": {"code_tools": ["lookup_*"], "mcp_servers": {}}},
            "default": {"code_tools": []},
        },
    )
    client = checking_client(harness, tenant_permits(settings))  # the same task queue
    emailer = (
        AgentBuilder("emailer", registry=harness.registry)
        .model("fake-model")
        .tool(lookup_order)
        .tool(send_email)
        .mcp_server("tools", mcp_http_server.url, transport="http")
        .build()
    )
    with pytest.raises(NotPermitted) as refused:
        await client.dispatch(emailer, "Email them", scope=harness.scope)
    assert refused.value.tenant == "acme"
    assert [str(problem) for problem in refused.value.problems] == [
        f"mcp_servers[tools]: MCP server 'tools' ({mcp_http_server.url}) is not permitted "
        "to tenant 'acme'",
        "tools[send_email]: code tool 'send_email' is not permitted to tenant 'acme'",
    ]
    # A tenant under no entry gets the default: no code tool at all.
    looker = (
        AgentBuilder("looker", registry=harness.registry).model("fake-model").tool(lookup_order)
    ).build()
    with pytest.raises(NotPermitted, match="code tool 'lookup_order' is not permitted to tenant "):
        await client.dispatch(looker, "Look", scope=GLOBEX)
    # What the tenant is permitted runs.
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "7"})), Reply.text("delivered")
    )
    async with run_worker(harness.env.client, settings):
        run = await client.dispatch(looker, "Look up 7", scope=harness.scope)
        result = await client.result(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason


async def test_a_run_started_otherwise_is_not_offered_unpermitted_code_and_http_tools(
    harness: Harness,
) -> None:
    # The harness's client knows no permits (as the temporal CLI would not): the worker's
    # catalogue leaves out what the tenant may not call, as MCP discovery does, and a call
    # of it anyway is denied with the permits' words (patch psych-unpermitted-told; an
    # unknown tool's before); the tool never runs.
    ran: list[str] = []
    settings = permitting(
        harness, {"tenants": {"acme": {"code_tools": ["lookup_*"], "http_tools": []}}}
    )
    spec = mailer(harness, ran, lookup_order)  # ping never offered, so never sent a request
    harness.fake.enqueue(
        Reply.tool_calls(
            ToolCall("send_mail", {"to": "a@example.test"}, id="c1"), ToolCall("ping", {}, id="c2")
        ),
        Reply.text("no"),
    )
    async with run_worker(harness.env.client, settings):
        run = await harness.client.dispatch(spec, "Mail", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    assert offered(harness.fake.requests[0]) == ["lookup_order"]
    mail, ping = report.tool_calls
    assert (mail.status, mail.result) == (
        "denied",
        "code tool 'send_mail' is not permitted to tenant 'acme'",
    )
    assert (ping.status, ping.result) == (
        "denied",
        "http tool 'ping' is not permitted to tenant 'acme'",
    )
    assert ran == []


async def test_a_code_or_http_call_after_its_permit_is_revoked_is_refused_before_it_runs(
    harness: Harness,
) -> None:
    ran: list[str] = []
    spec = mailer(harness, ran)
    # The Run's catalogue asks once for code tools and once for HTTP tools; the calls after.
    permits = Revoking(until=2)
    settings = dataclasses.replace(harness.settings, permits=permits)
    harness.fake.enqueue(
        Reply.tool_calls(
            ToolCall("send_mail", {"to": "a@example.test"}, id="c1"), ToolCall("ping", {}, id="c2")
        ),
        Reply.text("no"),
    )
    async with run_worker(harness.env.client, settings):
        run = await harness.client.dispatch(spec, "Mail", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    assert offered(harness.fake.requests[0]) == ["ping", "send_mail"]
    mail, ping = report.tool_calls
    assert (mail.status, mail.result) == (
        "denied",
        "code tool 'send_mail' is not permitted to tenant 'acme'",
    )
    assert (ping.status, ping.result) == (
        "denied",
        "http tool 'ping' is not permitted to tenant 'acme'",
    )
    assert ran == []
    assert permits.asked[:2] == [("acme", "code"), ("acme", "http")]


async def test_a_bad_permits_section_stops_the_worker_at_start_naming_file_and_key(
    harness: Harness, tmp_path: Path
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "permits:\n"
        "  tenants:\n"
        "    acme:\n"
        "      code_tools: ['look*up']\n"
        "      mcp: {}\n"
        "  everyone: {}\n"
    )
    settings = dataclasses.replace(harness.settings, settings_file=path)
    with pytest.raises(SpecError) as refused:
        async with run_worker(harness.env.client, settings):
            pytest.fail("the worker started")
    lines = str(refused.value).splitlines()
    assert lines == [
        f"{path}: permits.everyone: unknown setting (known: default, tenants)",
        f"{path}: permits.tenants.acme.mcp: unknown setting (known: a2a_peers, code_tools, "
        "http_tools, mcp_servers)",
        f"{path}: permits.tenants.acme.code_tools: 'look*up': '*' may only end an entry (a "
        "prefix such as 'get_*'); an entry matches a name exactly or by its trailing '*', "
        "nothing else",
    ]


async def test_a_call_after_its_permit_is_revoked_is_refused_before_it_is_sent(
    harness: Harness, mcp_http_server: McpTestServer
) -> None:
    server = mcp_http_server
    async with serve_peer(("echo", "wipe")) as peer:
        spec = (
            AgentBuilder("revoked")
            .model("fake-model")
            .mcp_server("tools", server.url, transport="http")
            .a2a_peer("helper", peer.url)
            .build()
        )
        # The turn's offer asks once per server and once per peer; the calls after it.
        permits = Revoking(until=2)
        settings = dataclasses.replace(harness.settings, permits=permits)
        harness.fake.enqueue(
            Reply.tool_calls(
                ToolCall("tools__charge", {"amount": 5}, id="c1"),
                ToolCall("helper__wipe", {"message": "everything"}, id="c2"),
            ),
            Reply.text("refused"),
        )
        async with run_worker(harness.env.client, settings):
            run = await harness.client.dispatch(spec, "Charge and wipe", scope=harness.scope)
            result = await harness.client.result(run, scope=harness.scope)
            report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    assert {"tools__charge", "helper__wipe"} <= set(offered(harness.fake.requests[0]))
    charge, wipe = report.tool_calls
    assert (charge.status, charge.result) == (
        "denied",
        "tool 'charge' of MCP server 'tools' is not permitted to tenant 'acme'",
    )
    assert (wipe.status, wipe.result) == (
        "denied",
        "skill 'wipe' of peer 'helper' is not permitted to tenant 'acme'",
    )
    assert server.calls("charge") == 0 and peer.texts() == []
    assert ("acme", "mcp") in permits.asked and ("acme", "a2a") in permits.asked


async def test_the_next_turn_is_offered_what_the_permits_answer_then(
    harness: Harness, mcp_http_server: McpTestServer
) -> None:
    # The server's listing is the worker's cached one on both turns: the catalogue built
    # for the first must not be reused once the port answers otherwise.
    spec = (
        AgentBuilder("narrowed")
        .model("fake-model")
        .mcp_server("tools", mcp_http_server.url, transport="http")
        .build()
    )
    settings = dataclasses.replace(harness.settings, permits=Revoking(until=1))
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("tools__echo", {"text": "hi"})), Reply.text("ok")
    )
    async with run_worker(harness.env.client, settings):
        run = await harness.client.dispatch(spec, "Echo", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    assert "tools__charge" in offered(harness.fake.requests[0])
    assert offered(harness.fake.requests[1]) == ["tools__echo", "tools__lookup"]


async def test_a_server_and_a_peer_permitted_nothing_are_never_contacted(
    harness: Harness, mcp_http_server: McpTestServer
) -> None:
    # A Run started without the client's check (the harness's client knows no permits):
    # the worker offers nothing of a server or peer its tenant is permitted nothing of, and
    # must not connect to either to find out (no tools/list, no card, no credential sent).
    server = mcp_http_server
    settings = permitting(harness, {"tenants": {"acme": {"mcp_servers": {}, "a2a_peers": {}}}})
    async with serve_peer(("echo",)) as peer:
        peer.down = True  # every request it gets is counted (answered 503)
        spec = (
            AgentBuilder("unpermitted")
            .model("fake-model")
            .mcp_server("tools", server.url, transport="http", credential="orders-key")
            .a2a_peer("helper", peer.url, optional=True)
            .build()
        )
        harness.fake.enqueue(Reply.text("nothing to use"))
        async with run_worker(harness.env.client, settings):
            run = await harness.client.dispatch(spec, "Go", scope=harness.scope)
            result = await harness.client.result(run, scope=harness.scope)
        refused = peer.refused
    assert result.status is RunStatus.COMPLETED, result.reason
    assert offered(harness.fake.requests[0]) == []
    assert server.bearers() == {}
    assert refused == 0


class Misanswering:
    """A ``TenantPermits`` given in code that answers one string, not a sequence of them:
    each of its characters would be a pattern, and its ``*`` one that permits every name.
    It answers None (no restriction) to its first ``after`` questions."""

    def __init__(self, after: int = 0) -> None:
        self.after = after
        self.asked = 0

    async def permitted(self, tenant: str, source: PermitSource) -> Any:
        self.asked += 1
        return None if self.asked <= self.after else "lookup_*"


async def test_a_port_answering_a_string_permits_nothing_and_says_so(harness: Harness) -> None:
    ran: list[str] = []
    send_mail = mail_sender(ran)

    spec = (
        AgentBuilder("mailer", registry=harness.registry).model("fake-model").tool(send_mail)
    ).build()
    client = checking_client(harness, Misanswering())
    # Nothing starts; the port's own error is named (PermitsUnavailable: a 503 over HTTP).
    with pytest.raises(PermitsUnavailable, match=r"TypeError: Misanswering\.permitted answered"):
        await client.dispatch(spec, "Mail", scope=harness.scope)
    # A Run started without the client's check, its catalogue offered before the port
    # misanswers (it asks once, for code tools): the worker's own check refuses the call.
    settings = dataclasses.replace(harness.settings, permits=Misanswering(after=1))
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("send_mail", {"to": "a@example.test"})), Reply.text("no")
    )
    async with run_worker(harness.env.client, settings):
        run = await harness.client.dispatch(spec, "Mail", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    [mail] = report.tool_calls
    assert mail.status == "error" and "answered 'lookup_*' for tenant 'acme'" in (
        mail.result or ""
    ), mail.result
    assert ran == []


class Failing:
    """A ``TenantPermits`` given in code whose tenant service is down for servers and
    peers: it raises when asked about one (code and HTTP tools are not restricted)."""

    async def permitted(self, tenant: str, source: PermitSource) -> tuple[str, ...] | None:
        if source.kind in ("mcp", "a2a"):
            raise RuntimeError("tenant service down")
        return None


FAILED_PORT = "the tenant permits for 'acme' could not be asked: RuntimeError: tenant service down"


async def test_an_optional_server_and_peer_whose_permits_fail_are_left_out_and_the_model_told(
    harness: Harness, mcp_http_server: McpTestServer
) -> None:
    server = mcp_http_server
    async with serve_peer(("echo",)) as peer:
        peer.down = True  # every request it gets is counted (answered 503)
        spec = (
            AgentBuilder("unknown-permits")
            .model("fake-model")
            .mcp_server(
                "tools", server.url, transport="http", credential="orders-key", optional=True
            )
            .a2a_peer("helper", peer.url, optional=True)
            .build()
        )
        settings = dataclasses.replace(harness.settings, permits=Failing())
        harness.fake.enqueue(Reply.text("nothing to use"))
        async with run_worker(harness.env.client, settings):
            run = await harness.client.dispatch(spec, "Go", scope=harness.scope)
            result = await harness.client.result(run, scope=harness.scope)
        refused = peer.refused
    assert result.status is RunStatus.COMPLETED, result.reason
    request = harness.fake.requests[0]
    assert offered(request) == []
    said = [message.get("content") for message in request["messages"]]
    assert (
        f"[runtime] A2A peer 'helper' is unavailable ({FAILED_PORT}); its skills are not "
        "offered until it answers again."
    ) in said
    assert (
        f"[runtime] MCP server 'tools' is unavailable ({FAILED_PORT}); its tools are not "
        "offered until it answers again."
    ) in said
    # Neither was contacted: what the tenant may use of them is not known.
    assert server.bearers() == {}
    assert refused == 0


async def test_a_required_server_or_peer_whose_permits_fail_fails_the_run_naming_the_error(
    harness: Harness, mcp_http_server: McpTestServer
) -> None:
    settings = dataclasses.replace(harness.settings, permits=Failing())
    async with serve_peer(("echo",)) as peer:
        with_server = (
            AgentBuilder("needs-server")
            .model("fake-model")
            .mcp_server("tools", mcp_http_server.url, transport="http")
            .build()
        )
        with_peer = AgentBuilder("needs-peer").model("fake-model").a2a_peer("helper", peer.url)
        async with run_worker(harness.env.client, settings):
            run = await harness.client.dispatch(with_server, "Go", scope=harness.scope)
            with pytest.raises(RunFailed) as by_server:
                await harness.client.result(run, scope=harness.scope)
            run = await harness.client.dispatch(with_peer.build(), "Go", scope=harness.scope)
            with pytest.raises(RunFailed) as by_peer:
                await harness.client.result(run, scope=harness.scope)
    assert str(by_server.value) == f"MCP server 'tools' is unreachable: {FAILED_PORT}"
    assert str(by_peer.value) == f"A2A peer 'helper' is unreachable: {FAILED_PORT}"
    assert harness.fake.requests == []


async def test_a_key_that_started_a_run_answers_with_it_after_a_revocation(
    harness: Harness,
) -> None:
    client = checking_client(harness, StaticPermits())  # nothing restricted yet
    looker = (
        AgentBuilder("looker", registry=harness.registry).model("fake-model").tool(lookup_order)
    ).build()
    harness.fake.enqueue(Reply.text("looked"))
    async with run_worker(harness.env.client, harness.settings):
        first = await client.dispatch(looker, "Look", scope=harness.scope, idempotency_key="k1")
        result = await client.result(first, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    # The operator revokes the tool; the dispatch is retried under its key (a client that
    # lost the answer): the key named one dispatch, which started its Run already.
    client.permits = StaticPermits(tenants={"acme": Permits(code_tools=())})
    again = await client.dispatch(looker, "Look", scope=harness.scope, idempotency_key="k1")
    assert again == first
    # What would start a Run is refused: a new key, or none.
    with pytest.raises(NotPermitted, match="code tool 'lookup_order' is not permitted"):
        await client.dispatch(looker, "Look", scope=harness.scope, idempotency_key="k2")
    with pytest.raises(NotPermitted):
        await client.dispatch(looker, "Look", scope=harness.scope)
    # The key with other input is the key's misuse, as before any revocation.
    with pytest.raises(PsychError, match=r"already started Run .* with another input"):
        await client.dispatch(looker, "Look again", scope=harness.scope, idempotency_key="k1")


async def test_a_workflow_tool_step_of_an_unpermitted_code_tool_fails_without_running_it(
    harness: Harness,
) -> None:
    # Started without the client's check: the Run's catalogue leaves the tool out, so the
    # step fails as one naming a tool the Run does not have, and the tool never runs.
    ran: list[str] = []
    send_mail = mail_sender(ran)

    spec = (
        WorkflowBuilder("mailing", registry=harness.registry)
        .tool(send_mail)
        .tool_step("mail", "send_mail", {"to": "a@example.test"})
        .build()
    )
    settings = permitting(harness, {"tenants": {"acme": {"code_tools": ["lookup_*"]}}})
    async with run_worker(harness.env.client, settings):
        run = await harness.client.dispatch(spec, "Mail", scope=harness.scope)
        with pytest.raises(RunFailed) as failed:
            await harness.client.result(run, scope=harness.scope)
    assert str(failed.value).startswith(
        "step 'mail' (tool) failed: error: unknown tool 'send_mail'"
    ), failed.value
    assert ran == []
