"""Start ``tests.mcp.oauth_server`` (an MCP server behind OAuth and its authorization
server) in its own process, for tests; stop it by its pid."""

from __future__ import annotations

import json
import os
import selectors
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx

from tests.forking.client import ForkedProcess, spawn
from tests.mcp.fixture import (
    START_TIMEOUT,
    STOP_TIMEOUT,
    Transport,
    server_stderr,
    stop_process,
)


@dataclass
class OAuthMcpServer:
    """A running ``tests.mcp.oauth_server`` and its control surface."""

    transport: Transport
    port: int
    """The resource server's (MCP's) loopback port."""
    as_port: int
    """The authorization server's loopback port."""
    as_host: str
    """The host name its issuer names (it listens on 127.0.0.1)."""
    process: ForkedProcess
    log: IO[bytes]

    @property
    def url(self) -> str:
        path = "/sse" if self.transport == "sse" else "/mcp"
        return f"http://127.0.0.1:{self.port}{path}"

    @property
    def issuer(self) -> str:
        """The authorization server's issuer identifier."""
        return f"http://{self.as_host}:{self.as_port}"

    def _control(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        response = httpx.request(
            method,
            f"http://127.0.0.1:{self.port}/control/{path}",
            content=None if body is None else json.dumps(body),
            timeout=10.0,
        )
        response.raise_for_status()
        answer: dict[str, Any] = response.json()
        return answer

    def state(self) -> dict[str, Any]:
        """``issued``, ``token_requests``, ``bearers``, ``calls`` (see the server)."""
        return self._control("GET", "state")

    def revoke_all(self) -> None:
        """Every token issued so far is refused from now on."""
        self._control("POST", "revoke")

    def set_clients(self, clients: dict[str, str]) -> None:
        """The clients (id -> secret) the authorization server knows from now on (none:
        every token request is refused, ``invalid_client``)."""
        self._control("POST", "clients", clients)

    def revoke_everything(self) -> None:
        """Every access and refresh token issued so far is refused (consent server)."""
        self._control("POST", "revoke-all")

    def consents(self) -> dict[str, Any]:
        """``authorized`` (a client id per consent given), ``refreshed`` and ``refused``
        (refresh grants answered, and refused as spent or unknown; consent server)."""
        return self._control("GET", "consents")

    def refuse_consent(self, error: str | None, description: str | None = None) -> None:
        """``/authorize`` refuses with ``error`` (and ``description``) from now on, as a
        person who denies consent; None: it consents again (consent server)."""
        body = {} if error is None else {"error": error, "description": description}
        self._control("POST", "refuse", body)

    def registered(self) -> list[dict[str, Any]]:
        """Each dynamic client registration taken: its metadata and ``client_id``
        (consent server with ``--registration``)."""
        registered: list[dict[str, Any]] = self.consents()["registered"]
        return registered

    def refuse_registration(self, error: str | None, description: str | None = None) -> None:
        """``/register`` answers 400 with ``error`` (and ``description``) from now on; None:
        it registers again (consent server)."""
        body = {} if error is None else {"error": error, "description": description}
        self._control("POST", "refuse-registration", body)

    def set_registration_reply(self, status: int, body: str) -> None:
        """``/register`` answers ``status`` with ``body`` instead of registering, from now
        on (consent server with ``--registration``)."""
        self._control("POST", "registration-reply", {"status": status, "body": body})

    def reset_registration_reply(self) -> None:
        """``/register`` registers again (after ``set_registration_reply``)."""
        self._control("POST", "registration-reply", {})

    def forget_registrations(self) -> None:
        """The authorization server forgets every client registered so far, as one that
        lost or expired them does (consent server with ``--registration``)."""
        self._control("POST", "forget-registrations")

    def set_authorize_iss(self, iss: str | None) -> None:
        """``/authorize``'s redirects carry ``iss`` (None: no ``iss``) from now on (consent
        server; ``reset_authorize_iss``: what ``--iss`` says again)."""
        self._control("POST", "authorize-iss", {"iss": iss})

    def reset_authorize_iss(self) -> None:
        """``/authorize``'s redirects carry the issuer with ``--iss``, else no ``iss``."""
        self._control("POST", "authorize-iss", {})

    def set_scopes(self, scopes: list[str] | None) -> None:
        """Name ``scopes`` in the protected-resource metadata (None: none;
        ``tests.mcp.consent_extensions``)."""
        self._control("POST", "scopes", {"scopes": scopes})

    def deletions(self) -> list[str]:
        """The client id of each RFC 7592 ``DELETE`` received, deleted or not (consent
        server with ``--registration-management``)."""
        deletions: list[str] = self.consents()["deletions"]
        return deletions

    def set_deletion_reply(self, status: int | None) -> None:
        """Each RFC 7592 ``DELETE`` answers ``status`` instead, deleting nothing, from now
        on (None: it deletes again; consent server with ``--registration-management``)."""
        self._control("POST", "deletion-reply", {"status": status})

    def deleted(self) -> list[str]:
        """The clients a ``DELETE`` with their registration access token deleted."""
        deleted: list[str] = self.consents()["deleted"]
        return deleted

    def set_refresh_delay(self, seconds: float) -> None:
        """Each answered refresh is held this long after its refresh token is spent
        (consent server)."""
        self._control("POST", "refresh-delay", {"seconds": seconds})

    def set_token_reply(self, status: int, body: str, media_type: str = "application/json") -> None:
        """The token endpoint answers an authenticated client ``status`` with ``body``
        instead of a token, from now on."""
        self._control("POST", "token-reply", {"status": status, "body": body, "type": media_type})

    def clear_token_reply(self) -> None:
        """The token endpoint issues tokens again."""
        self._control("POST", "token-reply", {})

    def set_lifetime(self, seconds: int) -> None:
        """The ``expires_in`` of tokens issued from now on."""
        self._control("POST", "lifetime", {"seconds": seconds})

    def stderr(self) -> str:
        return server_stderr(self.log)

    def stop(self) -> None:
        """Stop this server's own process (SIGTERM, SIGKILL after a grace period)."""
        stop_process(self.process, self.log)


def start_oauth_server(
    transport: Transport,
    clients: dict[str, str],
    module: str = "tests.mcp.oauth_server",
    *,
    as_host: str = "127.0.0.1",
    extra: tuple[str, ...] = (),
) -> OAuthMcpServer:
    """Start the server with ``clients`` (client id -> secret; for ``module``
    ``tests.mcp.consent_server``, client id -> redirect URI) registered; return once both
    ports listen. ``as_host`` is the host its issuer names (it listens on 127.0.0.1);
    ``extra`` are further arguments of ``module``. The caller stops it with ``stop()``."""
    args = ["--transport", transport]
    if as_host != "127.0.0.1":
        args += ["--as-host", as_host]
    for client_id, secret in clients.items():
        args += ["--client", f"{client_id}={secret}"]
    args += list(extra)
    log = tempfile.NamedTemporaryFile(prefix="mcp-oauth-", suffix=".log", delete=False)  # noqa: SIM115
    process = spawn(module, args, stderr=log)
    try:
        port, as_port = _read_ports(process, Path(log.name))
    except BaseException:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(STOP_TIMEOUT)
        if process.stdout is not None:
            process.stdout.close()  # else an unclosed-file warning fails a later test
        log.close()
        raise
    return OAuthMcpServer(transport, port, as_port, as_host, process, log)


def _read_ports(process: ForkedProcess, log: Path) -> tuple[int, int]:
    assert process.stdout is not None
    deadline = time.monotonic() + START_TIMEOUT
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while (left := deadline - time.monotonic()) > 0:
            if not selector.select(left):
                break
            line = process.stdout.readline().decode()
            if not line:
                break
            if line.startswith("ports "):
                _, rs, auth = line.split()
                return int(rs), int(auth)
    raise RuntimeError(f"the OAuth MCP server did not start ({process.poll()}): {log.read_text()}")
