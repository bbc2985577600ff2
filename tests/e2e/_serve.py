"""``psych serve`` under a real uvicorn on loopback for the e2e tests, and a reader of its
event streams; a JWKS served on loopback for the tests that sign in with JWTs."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import jwt
import uvicorn
from cryptography.hazmat.primitives.asymmetric import rsa

from psych_runtime.activities.egress import EgressSettings
from psych_runtime.activities.tokens import TokenStore
from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers.cli._logging import KEEP_ALIVE_SECONDS
from psych_runtime.workers.serve import ApiKey, AuthSettings, JwtSettings, ServeSettings, create_app
from psych_runtime.workflows import PsychClient

from ._waiting import eventually
from .conftest import Harness

ACME = {"Authorization": "Bearer acme-key-e2e"}
GLOBEX = {"Authorization": "Bearer globex-key-e2e"}
ISSUER = "https://idp.acme.test/"
AUDIENCE = "psych"


@asynccontextmanager
async def served(
    harness: Harness,
    query_timeout_seconds: float = 10.0,
    jwt_settings: JwtSettings | None = None,
    egress: EgressSettings | None = None,
    a2a_list_scan: int | None = None,
    client: PsychClient | None = None,
    push_tokens: TokenStore | None = None,
) -> AsyncIterator[str]:
    """The API of the harness's client (or ``client``) under a real uvicorn on 127.0.0.1
    (a free port), with the ``ACME`` and ``GLOBEX`` keys (and JWTs, with ``jwt_settings``;
    where push notifications may go, with ``egress``; how many Runs an A2A ListTasks
    filtered after reading looks at, with ``a2a_list_scan``; where push notification
    configurations are kept, with ``push_tokens``)."""
    keys = (
        ApiKey.of("acme-key-e2e", harness.scope.tenant, "alice", publisher=True),
        ApiKey.of("globex-key-e2e", "globex", "mallory"),
    )
    settings = ServeSettings(
        harness.client if client is None else client,
        AuthSettings(keys, jwt_settings),
        keepalive_seconds=0.2,
        query_timeout_seconds=query_timeout_seconds,
        egress=egress,
        push_tokens=push_tokens,
    )
    if a2a_list_scan is not None:
        settings = dataclasses.replace(settings, a2a_list_scan=a2a_list_scan)
    app = create_app(settings)
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_level="warning", timeout_keep_alive=KEEP_ALIVE_SECONDS
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    await eventually(lambda: _started(server), what="uvicorn to listen")
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


async def _started(server: uvicorn.Server) -> bool:
    return server.started


async def read_events(
    http: httpx.AsyncClient,
    url: str,
    headers: dict[str, str],
    until: str,
    into: list[tuple[str, str, Any]] | None = None,
) -> tuple[list[tuple[str, str, Any]], int]:
    """Events (name, id, data) of the stream until one whose data or name holds ``until``
    (or until the server ends the stream); also how many keep-alive comments came.
    ``into``: the list the events are appended to as they come (a fresh one by default)."""
    events: list[tuple[str, str, Any]] = [] if into is None else into
    comments = 0
    fields: dict[str, str] = {}
    async with http.stream("GET", url, headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        async for line in response.aiter_lines():
            if line.startswith(":"):
                comments += 1
                if until == "keep-alive":
                    break
            elif line:
                name, _, value = line.partition(": ")
                fields[name] = value
            elif fields:
                data = json.loads(fields["data"])
                events.append((fields.get("event", "message"), fields.get("id", ""), data))
                fields = {}
                if until in (events[-1][0], data.get("kind") if isinstance(data, dict) else ""):
                    break
    return events, comments


def jwt_settings(jwks_url: str) -> JwtSettings:
    """JWTs signed by ``jwt_bearer``'s issuer, no leeway: a token is refused from its exp."""
    return JwtSettings(jwks_url, ISSUER, AUDIENCE, ("RS256",), leeway_seconds=0)


def jwt_bearer(key: rsa.RSAPrivateKey, tenant: str, expires: int) -> dict[str, str]:
    """The ``Authorization`` header of a JWT for ``tenant`` (principal alice) signed by
    ``key`` as ``k1``, expiring at ``expires`` (seconds since the epoch)."""
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "tenant": tenant, "exp": expires}
    token = jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"})
    return {"Authorization": f"Bearer {token}"}


@contextmanager
def jwks(key: rsa.RSAPrivateKey, kid: str) -> Iterator[str]:
    """The URL of a JWKS holding ``key``'s public half as ``kid``, served on loopback."""
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    body = json.dumps({"keys": [{**public, "kid": kid, "use": "sig", "alg": "RS256"}]}).encode()

    class Jwks(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Jwks)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/jwks.json"
    finally:
        server.shutdown()
        server.server_close()


def asking_agent(harness: Harness, prefix: str) -> str:
    """Publish an agent that may ask questions, its model scripted to ask "Which day?"
    (call ``q1``) first; answers its name, ``prefix`` and a random suffix."""
    agent = f"{prefix}{uuid.uuid4().hex[:8]}"
    harness.client.publish(
        AgentBuilder(agent).model("fake-model").suspension(may_ask_questions=True).build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("ask_question", {"question": "Which day?"}, id="q1"))
    )
    return agent
