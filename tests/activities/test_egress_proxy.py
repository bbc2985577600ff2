"""The operator's proxy settings reach the operator's own endpoints (model calls), and
only them (``activities/egress/_proxies.py``). Real HTTP servers on loopback: an origin,
and a proxy that answers in the origin's stead and keeps each request line it was sent."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from psych_runtime.activities.egress import Egress, EgressRules, EgressSettings
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


async def test_a_model_endpoint_is_reached_through_the_operators_proxy(
    servers: tuple[Server, Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    origin, proxy = servers
    # "localhost": the proxy's host is reached as an operator endpoint is, though the
    # policy (no allow rules: not the suite's loopback allowance) refuses loopback to a
    # host nobody configured.
    monkeypatch.setenv("HTTP_PROXY", f"http://localhost:{proxy.port}")
    port = Egress(EgressSettings(), operator_hosts=frozenset({"127.0.0.1"}))
    try:
        url = f"http://127.0.0.1:{origin.port}/v1/chat/completions"
        answer = await port.http(None, "operator").get(url)
    finally:
        await port.aclose()
    assert answer.text == "proxy"
    assert proxy.lines == [f"GET {url} HTTP/1.1"]
    assert origin.lines == []


async def test_no_proxy_and_a_specs_url_go_straight_to_the_host(
    servers: tuple[Server, Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    origin, proxy = servers
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
    url = f"http://127.0.0.1:{origin.port}/v1/models"
    loopback = EgressSettings(rules=EgressRules(allow_cidrs=("127.0.0.1/32",)))
    port = Egress(loopback, operator_hosts=frozenset({"127.0.0.1"}))
    try:
        # A Spec's URL never goes through a proxy: the policy judges the address itself.
        assert (await port.http("acme", "spec").get(url)).text == "origin"
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        assert (await port.http(None, "operator").get(url)).text == "origin"
    finally:
        await port.aclose()
    assert proxy.lines == []
    assert origin.lines == ["GET /v1/models HTTP/1.1"] * 2


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
