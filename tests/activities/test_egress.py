"""The egress policy on real loopback sockets: what a Spec's URL may reach, and what not.

Every server here listens on 127.0.0.1. Names that would lead elsewhere (a private address,
the cloud metadata address) are answered by a resolver the test controls, and the tests
assert that no connection was attempted for them: nothing leaves 127.0.0.0/8.
"""

from __future__ import annotations

import asyncio
import gzip
import ipaddress
import re
import zlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from temporalio.testing import ActivityEnvironment

from psych_runtime.activities import LocalBlobStore
from psych_runtime.activities.a2a import A2aSettings, check_peers
from psych_runtime.activities.egress import (
    Egress,
    EgressDenied,
    EgressPolicy,
    EgressRules,
    EgressSettings,
    McpResponseTooLarge,
    ResponseTooLarge,
    blocked_kind,
)
from psych_runtime.activities.mcp import check_servers
from psych_runtime.activities.tools import ToolActivities
from psych_runtime.specs import A2APeer, HttpTool, McpServer, Scope, ToolRegistry
from tests._upstream import Answer, Request, Upstream, dripping
from tests.activities.test_tools import http_call

SCOPE = Scope(tenant="acme")
NAMES = {
    "internal.test": ["10.1.2.3"],
    "metadata.test": ["169.254.169.254"],
    "app.test": ["127.0.0.1"],
    "split.test": ["169.254.169.254", "127.0.0.1"],
}


async def resolver(host: str, port: int) -> list[str]:
    """The test's DNS: only the names above, never the system's."""
    return NAMES[host]


def ok(request: Request) -> Answer:
    return Answer(200, '{"ok": true}')


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with Upstream(ok) as server:
        yield server


def port_of(upstream: Upstream) -> int:
    return int(upstream.url.rsplit(":", 1)[1])


def egress(**rules: tuple[str, ...]) -> Egress:
    return Egress(EgressSettings(rules=EgressRules(**rules)), resolver=resolver)


async def get(port: Egress, url: str, tenant: str = "acme") -> httpx.Response:
    return await port.http(tenant).get(url)


async def test_a_spec_url_on_loopback_is_refused_by_default_and_allowed_when_the_operator_allows_it(
    upstream: Upstream,
) -> None:
    refusing = egress()
    with pytest.raises(EgressDenied, match="loopback addresses are refused") as caught:
        await get(refusing, upstream.url + "/x")
    assert caught.value.refusal.kind == "loopback"
    assert (refusing.connects, len(upstream.requests)) == (0, 0)

    allowing = egress(allow_cidrs=("127.0.0.0/8",))
    assert (await get(allowing, upstream.url + "/x")).json() == {"ok": True}
    assert (allowing.connects, len(upstream.requests)) == (1, 1)
    await refusing.aclose()
    await allowing.aclose()


@pytest.mark.parametrize(
    ("name", "kind"), [("internal.test", "private"), ("metadata.test", "link-local")]
)
async def test_a_name_resolving_to_a_private_or_metadata_address_is_refused_before_connecting(
    name: str, kind: str
) -> None:
    port = egress()
    with pytest.raises(EgressDenied) as caught:
        await get(port, f"http://{name}/latest/meta-data/")
    assert caught.value.refusal.kind == kind
    assert caught.value.refusal.address == NAMES[name][0]
    assert port.connects == 0  # refused before any connection was attempted
    await port.aclose()


async def test_a_name_resolving_to_loopback_is_refused_unless_allowed(upstream: Upstream) -> None:
    url = f"http://app.test:{port_of(upstream)}/x"
    refusing = egress()
    with pytest.raises(EgressDenied, match=r"app.test -> 127.0.0.1"):
        await get(refusing, url)
    allowing = egress(allow_hosts=("*.test",))
    assert (await get(allowing, url)).status_code == 200
    # The request still names the host; only the connection went to the checked address.
    assert upstream.requests[-1].headers["host"] == f"app.test:{port_of(upstream)}"
    await refusing.aclose()
    await allowing.aclose()


async def test_only_the_allowed_addresses_of_a_name_are_connected_to(upstream: Upstream) -> None:
    port = egress(allow_cidrs=("127.0.0.0/8",))
    response = await get(port, f"http://split.test:{port_of(upstream)}/x")
    assert response.status_code == 200
    assert port.connects == 1  # 127.0.0.1 only: the metadata address was never tried
    await port.aclose()


async def test_every_redirect_is_judged_again() -> None:
    with Upstream(ok) as target:

        def moved(request: Request) -> Answer:
            return Answer(302, "", headers=(("location", target.url + "/secret"),))

        with Upstream(moved) as first:
            # Allowed by name; the redirect names the loopback address itself, which is not.
            port = egress(allow_hosts=("app.test",))
            with pytest.raises(EgressDenied, match="loopback"):
                await get(port, f"http://app.test:{port_of(first)}/start")
            assert (len(first.requests), target.requests) == (1, [])
            await port.aclose()


async def test_a_tenants_own_rules_come_first_and_deny_wins(upstream: Upstream) -> None:
    settings = EgressSettings(
        rules=EgressRules(allow_cidrs=("127.0.0.0/8",)),
        tenants={"globex": EgressRules(deny_hosts=("app.test",))},
    )
    port = Egress(settings, resolver=resolver)
    url = f"http://app.test:{port_of(upstream)}/x"
    assert (await get(port, url, tenant="acme")).status_code == 200
    with pytest.raises(EgressDenied, match=r"denied by tenant 'globex'.s rule host app\.test"):
        await get(port, url, tenant="globex")
    await port.aclose()


async def test_response_bodies_are_bounded(upstream: Upstream) -> None:
    with Upstream(lambda request: Answer(200, "x" * 5000, "text/plain")) as big:
        settings = EgressSettings(
            rules=EgressRules(allow_cidrs=("127.0.0.0/8",)), max_response_bytes=1000
        )
        port = Egress(settings, resolver=resolver)
        with pytest.raises(ResponseTooLarge, match="over 1000 bytes"):
            await get(port, big.url)
        assert (await get(port, upstream.url)).status_code == 200
        await port.aclose()


async def test_mcp_response_bodies_are_bounded_but_event_streams_are_not() -> None:
    def answer(request: Request) -> Answer:
        if request.path == "/events":
            return Answer(200, "data: " + "x" * 5000 + "\n\n", "text/event-stream")
        return Answer(200, '{"x": "' + "x" * 5000 + '"}')

    with Upstream(answer) as big:
        settings = EgressSettings(
            rules=EgressRules(allow_cidrs=("127.0.0.0/8",)), max_response_bytes=1000
        )
        port = Egress(settings, resolver=resolver)
        async with port.mcp_client("acme") as client:
            # What the MCP SDK does with a JSON-RPC reply or an OAuth document: read it whole.
            with pytest.raises(McpResponseTooLarge, match="over 1000 bytes"):
                await client.post(f"{big.url}/mcp", json={})
            # A session's event stream lives as long as the session: the SDK bounds events.
            stream = {"Accept": "text/event-stream"}
            events = await client.get(f"{big.url}/events", headers=stream)
            assert len(events.content) > 5000
            # The same label on a body nobody asked to stream (an OAuth document) is bounded.
            with pytest.raises(McpResponseTooLarge, match="over 1000 bytes"):
                await client.get(f"{big.url}/events")
        await port.aclose()


async def test_an_encoded_body_is_bounded_as_it_decodes() -> None:
    bomb = gzip.compress(b" " * 200_000)  # ~200 bytes that decode to 200 KB
    small = b'{"ok": true}'

    def answer(request: Request) -> Answer:
        # What a server that ignores Accept-Encoding: identity sends.
        if request.path == "/small":
            return Answer(
                200, gzip.compress(small), "application/json", (("Content-Encoding", "gzip"),)
            )
        if request.path == "/brotli":
            return Answer(200, b"...", "application/json", (("Content-Encoding", "br"),))
        return Answer(200, bomb, "application/json", (("Content-Encoding", "gzip"),))

    with Upstream(answer) as server:
        settings = EgressSettings(
            rules=EgressRules(allow_cidrs=("127.0.0.0/8",)), max_response_bytes=1000
        )
        port = Egress(settings, resolver=resolver)
        http = port.http("acme")
        with pytest.raises(ResponseTooLarge, match="over 1000 bytes"):
            await http.get(f"{server.url}/bomb")
        assert (await http.get(f"{server.url}/small")).content == small
        with pytest.raises(ResponseTooLarge, match="sent a br-encoded body though asked"):
            await http.get(f"{server.url}/brotli")
        async with port.mcp_client("acme") as client:
            with pytest.raises(McpResponseTooLarge, match="over 1000 bytes"):
                await client.get(f"{server.url}/bomb")
            assert (await client.get(f"{server.url}/small")).content == small
        assert {r.headers.get("accept-encoding") for r in server.requests} == {"identity"}
        await port.aclose()


def test_a_cidr_rule_holds_for_the_ipv4_mapped_form_of_its_addresses() -> None:
    policy = EgressPolicy(
        EgressSettings(
            rules=EgressRules(deny_cidrs=("93.184.216.0/24",)),
            tenants={"acme": EgressRules(allow_cidrs=("127.0.0.0/8",))},
        )
    )
    for url in ("http://93.184.216.34/", "http://[::ffff:93.184.216.34]/"):
        refused = policy.judge(url, None)
        assert refused is not None and refused.kind == "denied", url
    assert policy.judge("http://[::ffff:127.0.0.1]/", "acme") is None
    # An IPv6 rule holds for no IPv4 address: an allow of ::/0 opens no IPv4 address by
    # its mapped spelling; a deny of ::/0 refuses IPv6 and the mapped spelling only.
    v6 = EgressPolicy(
        EgressSettings(
            tenants={
                "acme": EgressRules(allow_cidrs=("::/0",)),
                "globex": EgressRules(deny_cidrs=("::/0",)),
            }
        )
    )
    for url in ("http://169.254.169.254/", "http://[::ffff:169.254.169.254]/"):
        refused = v6.judge(url, "acme")
        assert refused is not None and refused.kind == "link-local", url
    assert v6.judge("http://8.8.8.8/", "globex") is None
    refused = v6.judge("http://[::ffff:8.8.8.8]/", "globex")
    assert refused is not None and refused.kind == "denied"
    # A rule written in the mapped form holds for both forms too.
    mapped = EgressPolicy(
        EgressSettings(rules=EgressRules(deny_cidrs=("::ffff:93.184.216.0/120",)))
    )
    for url in ("http://93.184.216.34/", "http://[::ffff:93.184.216.34]/"):
        refused = mapped.judge(url, None)
        assert refused is not None and refused.kind == "denied", url


async def test_encoded_bodies_decode_as_servers_send_them_or_are_refused_naming_why() -> None:
    body = b'{"ok": true}'
    raw = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    bodies: dict[str, tuple[bytes, str]] = {
        "/members": (gzip.compress(body[:5]) + gzip.compress(body[5:]), "gzip"),
        "/raw-deflate": (raw.compress(body) + raw.flush(), "deflate"),
        "/zlib-deflate": (zlib.compress(body), "deflate"),
        "/cut": (gzip.compress(body)[:-8], "gzip"),
        "/trailing": (gzip.compress(body) + b"not gzip", "gzip"),
        "/padded": (gzip.compress(body) + b"\x1f\x8b" + b"\x00" * 5000, "gzip"),
    }

    def answer(request: Request) -> Answer:
        data, encoding = bodies[request.path]
        headers = (("Content-Encoding", encoding), ("X-Name", "caf\u00e9"))
        return Answer(200, data, "application/json", headers)

    with Upstream(answer) as server:
        settings = EgressSettings(
            rules=EgressRules(allow_cidrs=("127.0.0.0/8",)), max_response_bytes=1000
        )
        port = Egress(settings, resolver=resolver)
        http = port.http("acme")
        for path in ("/members", "/raw-deflate", "/zlib-deflate"):
            assert (await http.get(f"{server.url}{path}")).content == body, path
        with pytest.raises(httpx.DecodingError, match="cut short"):
            await http.get(f"{server.url}/cut")
        with pytest.raises(httpx.DecodingError, match="after the end"):
            await http.get(f"{server.url}/trailing")
        # Bytes on the wire count too: what decodes to nothing cannot grow without bound.
        with pytest.raises(ResponseTooLarge, match="over 1000 bytes"):
            await http.get(f"{server.url}/padded")
        await port.aclose()


def test_the_default_refuses_every_kind_of_address_a_network_trusts() -> None:
    kinds = {
        text: blocked_kind(ipaddress.ip_address(text))
        for text in (
            "127.0.0.1", "::1", "10.0.0.1", "172.16.0.1", "192.168.1.1", "fd00::1",
            "169.254.169.254", "fe80::1", "100.100.100.200", "224.0.0.1", "0.0.0.0",
            "::ffff:127.0.0.1", "93.184.215.14", "2606:4700::1111",
        )
    }  # fmt: skip
    assert kinds == {
        "127.0.0.1": "loopback",
        "::1": "loopback",
        "10.0.0.1": "private",
        "172.16.0.1": "private",
        "192.168.1.1": "private",
        "fd00::1": "private",
        "169.254.169.254": "link-local (cloud metadata among them)",
        "fe80::1": "link-local (cloud metadata among them)",
        "100.100.100.200": "shared (carrier-grade NAT) and cloud metadata",
        "224.0.0.1": "multicast",
        "0.0.0.0": "unspecified",
        "::ffff:127.0.0.1": "loopback",
        "93.184.215.14": None,
        "2606:4700::1111": None,
    }


def test_bad_rules_name_what_is_wrong() -> None:
    with pytest.raises(ValueError, match=r"'10\.0\.0\.0/33' is not a CIDR"):
        EgressRules(allow_cidrs=("10.0.0.0/33",))
    # A host with a port, a scheme-less URL, a space: a pattern no host name ever matches,
    # so a deny rule written so denied nothing, silently.
    for entry in ("evil.example:443", "*.evil.example:8443", "ex ample.com", "u@evil.example"):
        with pytest.raises(ValueError, match=f"{re.escape(repr(entry))} is not a host pattern"):
            EgressRules.parse("", f"ok.example,{entry}")
        with pytest.raises(ValueError, match="is not a host pattern"):
            EgressRules(deny_hosts=(entry,))
    rules = EgressRules.parse("10.0.0.0/8, *.corp.example ,", "Metadata.Test")
    assert rules == EgressRules(
        allow_hosts=("*.corp.example",), allow_cidrs=("10.0.0.0/8",), deny_hosts=("metadata.test",)
    )


SPEC_RULE = (
    "addresses are refused for URLs from a Spec unless the operator allows them (egress "
    "allow list: PSYCH_EGRESS_ALLOW or the settings file)"
)
"""The end of every refusal of a Spec's URL, after the kind of address."""

# --- the outbound paths ----------------------------------------------------------------------


@pytest.fixture
def blobs(tmp_path: Path) -> LocalBlobStore:
    return LocalBlobStore(tmp_path)


async def test_an_http_tool_refused_is_a_denied_outcome_the_model_reads(
    upstream: Upstream, blobs: LocalBlobStore
) -> None:
    port = egress()
    tools = ToolActivities(registry=ToolRegistry(), blobs=blobs, egress=port)
    tool = HttpTool(name="refund", description="Refund.", url=upstream.url + "/orders/{id}")
    outcome = await ActivityEnvironment().run(tools.http, http_call(tool, id="42"))
    assert (outcome.status, outcome.content) == (
        "denied",
        f"refund: egress refused: 127.0.0.1: loopback {SPEC_RULE}",
    )
    assert upstream.requests == []
    await tools.aclose()
    await port.aclose()


async def test_an_mcp_server_url_goes_through_the_same_check() -> None:
    port = egress()
    server = McpServer(name="internal", url="http://internal.test/mcp")
    loopback = McpServer(name="local", url="http://127.0.0.1:9/mcp")
    reasons = await check_servers([server, loopback], SCOPE, None, egress=port)
    assert reasons == {
        "internal": "EgressDenied: egress refused: internal.test (internal.test -> 10.1.2.3): "
        f"private {SPEC_RULE}",
        "local": f"EgressDenied: egress refused: 127.0.0.1: loopback {SPEC_RULE}",
    }
    assert port.connects == 0
    await port.aclose()


async def test_a_peers_card_that_drips_in_is_given_up_on_within_the_bound() -> None:
    port = Egress(EgressSettings(rules=EgressRules(allow_cidrs=("127.0.0.0/8",))))
    loop = asyncio.get_running_loop()
    try:
        async with dripping() as url:
            started = loop.time()
            (checked,) = await check_peers(
                [A2APeer(name="slow", url=url)],
                scope=SCOPE,
                secrets=None,
                egress=port,
                settings=A2aSettings(card_timeout_seconds=0.5),
            )
            took = loop.time() - started
    finally:
        await port.aclose()
    assert checked.error == "no card within 0.5 s"
    assert took < 2.0  # ~10 s when only each read was bounded


@pytest.mark.parametrize(
    "url", ["http://localhost.:9/mcp", "http://LOCALHOST./x", "http://api.localhost./x"]
)
def test_judging_a_spec_url_reads_localhost_with_a_trailing_dot_as_loopback(url: str) -> None:
    # The fully qualified spelling reaches the same loopback address (the worker's lookup
    # refuses it when connecting), but validate's judgement without a lookup let it pass.
    refusal = EgressPolicy(EgressSettings()).judge(url, "acme")
    assert refusal is not None
    assert (refusal.kind, refusal.address) == ("loopback", "127.0.0.1")
