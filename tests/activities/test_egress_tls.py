"""TLS through the egress port: one context for every client a process makes, and it still
verifies the server's certificate (a real TLS server on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from psych_runtime.activities.egress import Egress, EgressRules, EgressSettings

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


def _self_signed(directory: Path) -> ssl.SSLContext:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    (directory / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(directory / "cert.pem", directory / "key.pem")
    return context


@asynccontextmanager
async def tls_server(directory: Path) -> AsyncIterator[str]:
    """An HTTPS server on loopback whose certificate no public CA signed."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass  # the client refused the handshake: what the tests expect
        finally:
            writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=_self_signed(directory))
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"https://127.0.0.1:{port}"
    finally:
        server.close()
        await server.wait_closed()


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
