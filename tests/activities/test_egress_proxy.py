"""The operator's proxy settings reach the operator's own endpoints (model calls), and
only them (``activities/egress/_proxies.py``). Real HTTP servers on loopback: an origin,
and a proxy that answers in the origin's stead and keeps each request line it was sent."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from psych_runtime.activities.egress import Egress, EgressDenied, EgressRules, EgressSettings
from psych_runtime.specs import SpecError

_PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


@dataclass
class Server:
    """A loopback HTTP server answering every request with its name."""

    name: str
    port: int = 0
    lines: list[str] = field(default_factory=list)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.lines.append((await reader.readline()).decode().strip())
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        body = self.name.encode()
        writer.write(
            b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: %d\r\n\r\n%s"
            % (len(body), body)
        )
        await writer.drain()
        writer.close()


@pytest.fixture
def no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture
async def servers(no_proxies: None) -> AsyncIterator[tuple[Server, Server]]:
    origin, proxy = Server("origin"), Server("proxy")
    started = [await asyncio.start_server(s.handle, "127.0.0.1", 0) for s in (origin, proxy)]
    for server, running in zip((origin, proxy), started, strict=True):
        server.port = running.sockets[0].getsockname()[1]
    yield origin, proxy
    for running in started:
        running.close()
        await running.wait_closed()


async def _models_internal(host: str, port: int) -> list[str]:
    """The tests' DNS: the model endpoint's name is the origin's loopback address."""
    assert host in ("models.internal", "localhost"), host
    return ["127.0.0.1"]


async def test_a_model_endpoint_is_reached_through_the_operators_proxy(
    servers: tuple[Server, Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    origin, proxy = servers
    # "localhost": the proxy's host is reached as an operator endpoint is, though the
    # policy (no allow rules: not the suite's loopback allowance) refuses loopback to a
    # host nobody configured.
    monkeypatch.setenv("HTTP_PROXY", f"http://localhost:{proxy.port}")
    port = Egress(EgressSettings(), operator_hosts=frozenset({"models.internal"}))
    try:
        url = f"http://models.internal:{origin.port}/v1/chat/completions"
        answer = await port.http(None, "operator").get(url)
    finally:
        await port.aclose()
    assert answer.text == "proxy"
    assert proxy.lines == [f"GET {url} HTTP/1.1"]
    assert origin.lines == []


async def test_no_proxy_loopback_and_a_specs_url_go_straight_to_the_host(
    servers: tuple[Server, Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    origin, proxy = servers
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
    loopback = EgressSettings(rules=EgressRules(allow_cidrs=("127.0.0.1/32",)))
    hosts = frozenset({"models.internal", "127.0.0.1", "localhost"})
    port = Egress(loopback, operator_hosts=hosts, resolver=_models_internal)
    try:
        # A Spec's URL never goes through a proxy: the policy judges the address itself.
        spec = f"http://127.0.0.1:{origin.port}/v1/spec"
        assert (await port.http("acme", "spec").get(spec)).text == "origin"
        # Nor does the worker's own host: a proxy would reach its own (``LOOPBACK``).
        model = port.http(None, "operator")
        for host in ("127.0.0.1", "localhost"):
            assert (await model.get(f"http://{host}:{origin.port}/v1/own")).text == "origin"
        monkeypatch.setenv("NO_PROXY", "models.internal")
        named = f"http://models.internal:{origin.port}/v1/named"
        other = Egress(loopback, operator_hosts=hosts, resolver=_models_internal)
        try:
            assert (await other.http(None, "operator").get(named)).text == "origin"
        finally:
            await other.aclose()
    finally:
        await port.aclose()
    assert proxy.lines == []
    assert origin.lines == [
        "GET /v1/spec HTTP/1.1",
        "GET /v1/own HTTP/1.1",
        "GET /v1/own HTTP/1.1",
        "GET /v1/named HTTP/1.1",
    ]


async def test_a_proxy_the_client_cannot_go_through_is_refused_naming_its_variable(
    no_proxies: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ALL_PROXY", "socks5://ops:s3cret@127.0.0.1:1080")
    port = Egress(operator_hosts=frozenset({"127.0.0.1"}))
    with pytest.raises(SpecError) as refused:
        port.http(None, "operator")
    assert str(refused.value) == (
        "ALL_PROXY=socks5://127.0.0.1:1080: a 'socks5' proxy; the model endpoints' "
        "client goes through http or https proxies only"
    )
    await port.aclose()


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        (
            {"HTTPS_PROXY": "http://ops:s3cret@proxy.example:abc"},
            "HTTPS_PROXY: not a proxy URL (Invalid port: 'abc')",
        ),
        ({"HTTP_PROXY": "http://ops:s3cret@"}, "HTTP_PROXY: a proxy URL with no host"),
        (
            {"HTTPS_PROXY": "http://127.0.0.1:3128", "NO_PROXY": "example.com, internal:abc"},
            "NO_PROXY: 'internal:abc' is not a host, address or network (Invalid port: 'abc')",
        ),
        (
            {"HTTPS_PROXY": "http://127.0.0.1:3128", "no_proxy": "10.0.0.0/99"},
            "no_proxy: '10.0.0.0/99' is not a network (an address, a slash and the prefix length)",
        ),
        # Both spellings set: the lower case one is the one in force (urllib's rule), and
        # the one named.
        (
            {"HTTPS_PROXY": "http://127.0.0.1:3128", "https_proxy": "socks5://127.0.0.1:1080"},
            "https_proxy=socks5://127.0.0.1:1080: a 'socks5' proxy; the model endpoints' "
            "client goes through http or https proxies only",
        ),
    ],
)
async def test_a_proxy_setting_the_client_cannot_use_is_refused_naming_its_variable(
    no_proxies: None, monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], message: str
) -> None:
    # Before, an unparsable proxy or NO_PROXY entry stopped the worker with httpx's
    # InvalidURL traceback naming no variable, and a proxy with no host was taken.
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    port = Egress(operator_hosts=frozenset({"127.0.0.1"}))
    with pytest.raises(SpecError) as refused:
        port.http(None, "operator")
    assert str(refused.value) == message
    await port.aclose()


async def test_an_address_in_a_no_proxy_network_goes_straight(
    servers: tuple[Server, Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    # httpx's mounts take "10.0.0.0/8" as the one address 10.0.0.0, and refuse an IPv6
    # network ("fd00::/8": InvalidURL when the client is made). Sent straight, 10.1.2.3 is
    # refused by the policy before any connection (a private address nobody configured):
    # through the proxy it would have been answered by it.
    origin, proxy = servers
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
    monkeypatch.setenv("NO_PROXY", "fd00::/8, 10.0.0.0/8")
    port = Egress(EgressSettings(), operator_hosts=frozenset({"models.internal"}))
    try:
        client = port.http(None, "operator")
        with pytest.raises(EgressDenied, match=r"10\.1\.2\.3"):
            await client.get(f"http://10.1.2.3:{origin.port}/v1/models")
        # A name is not matched by address: through the proxy.
        named = f"http://models.internal:{origin.port}/v1/models"
        assert (await client.get(named)).text == "proxy"
    finally:
        await port.aclose()
    assert origin.lines == []
    assert proxy.lines == [f"GET {named} HTTP/1.1"]
