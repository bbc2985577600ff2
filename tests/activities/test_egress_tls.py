"""TLS through the egress port: one context for every client a process makes, and it still
verifies the server's certificate (a real TLS server on 127.0.0.1)."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest

from psych_runtime.activities.egress import Egress, EgressRules, EgressSettings
from tests._tls import tls_server

LOOPBACK = EgressSettings(rules=EgressRules(allow_cidrs=("127.0.0.0/8",)))


def port_of_loopback() -> Egress:
    return Egress(LOOPBACK)


async def test_clients_made_after_the_first_build_no_tls_context(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = port_of_loopback()
    first.http("acme")
    await first.mcp_client("acme").aclose()
    built: list[tuple[Any, ...]] = []
    real: Callable[..., None] = ssl.SSLContext.load_verify_locations

    def counting(context: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
        built.append(args)
        real(context, *args, **kwargs)

    # What building one costs: loading CA certificates. httpx's context is made by
    # ssl.create_default_context, httpx2's (on Linux) by ssl.SSLContext: both load them so.
    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counting)
    # Another worker's port in the same process, every kind of client it makes.
    second = port_of_loopback()
    second.http("acme")
    second.http(None, "operator")
    sessions = [second.mcp_client("acme") for _ in range(3)]
    # Each used to build two (~20 ms of CPU apiece: certifi's CA bundle loaded again).
    assert built == []
    for session in sessions:
        await session.aclose()
    await first.aclose()
    await second.aclose()


async def test_the_shared_context_still_refuses_a_certificate_no_ca_signed(
    tmp_path: Path,
) -> None:
    port = port_of_loopback()
    async with tls_server(tmp_path) as url:
        for _ in range(2):  # the second client gets the context the first one made
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await port.http("acme").get(url + "/x")
            async with port.mcp_client("acme") as session:
                with pytest.raises(httpx2.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                    await session.get(url + "/mcp")
    await port.aclose()
