"""A Run whose MCP server is behind OAuth and whose worker keeps its tokens in S3 (moto
behind a TCP relay the test closes): the token store not answering while an agent's turn
discovers the server (inside the model call) is a store outage, transient for the model
call as any store's (the Run's ``transient_retry_budget``), not the server unreachable,
which fails the Run for good when the server is required.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Iterator

import pytest

from psych_runtime.activities import McpSettings, StaticSecretResolver
from psych_runtime.activities.blobs import parse_s3_url
from psych_runtime.activities.tokens import S3TokenStore
from psych_runtime.specs import AgentBuilder, McpOAuth
from psych_runtime.testing import Reply
from psych_runtime.workers import run_worker
from psych_runtime.workflows import ModelCallFailed, RunSettled, RunStatus
from tests._s3_server import REGION, S3Server, s3_server
from tests._tcp_gate import TcpGate, s3_gate
from tests.mcp.oauth_fixture import OAuthMcpServer, start_oauth_server

from ._waiting import all_records, eventually
from .conftest import Harness

pytestmark = pytest.mark.e2e

CLIENT = "psych-worker"
SECRET = "cc-SECRET-7a6b5c4d3e2f"


@pytest.fixture(scope="module")
async def s3() -> AsyncIterator[S3Server]:
    async with s3_server() as server:
        yield server


@pytest.fixture
def oauth_server() -> Iterator[OAuthMcpServer]:
    server = start_oauth_server("streamable-http", {CLIENT: SECRET})
    yield server
    server.stop()


@pytest.fixture
async def gate(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[TcpGate]:
    """A relay to the S3 server; the worker's clients make one attempt per request."""
    async with s3_gate(s3.endpoint, monkeypatch) as relay:
        yield relay


async def test_a_token_store_outage_at_discovery_is_transient_for_the_model_call(
    harness: Harness, s3: S3Server, gate: TcpGate, oauth_server: OAuthMcpServer
) -> None:
    # Until 12-06 the token store's StoreUnavailable made the server "unavailable" for the
    # turn: a required server failed the Run at once ("MCP server 'crm' is unreachable:
    # ... the S3 token store did not answer ..."), though the server never was asked.
    harness.fake.enqueue(Reply.text("done"))
    spec = (
        AgentBuilder("crm-agent")
        .model("fake-model")
        .mcp_server(
            "crm",
            oauth_server.url,
            oauth=McpOAuth(preregistered_client_id=CLIENT, client_secret_credential="crm"),
        )
        .limits(transient_retry_budget=8)
        .build()
    )
    bucket = await s3.new_bucket(versioned=False)
    tokens = S3TokenStore(parse_s3_url(f"s3://{bucket}?endpoint={gate.endpoint}&region={REGION}"))
    settings = dataclasses.replace(
        harness.settings,
        tokens=tokens,
        secrets=StaticSecretResolver({"crm": SECRET}),
        mcp=McpSettings(oauth_issuers={"crm": oauth_server.issuer}),
    )
    await gate.close()
    try:
        async with run_worker(harness.env.client, settings):
            run = await harness.client.dispatch(spec, "Hi", scope=harness.scope)

            async def failed_once() -> bool:
                records = await all_records(harness.client, run, harness.scope)
                return any(isinstance(r, ModelCallFailed | RunSettled) for r in records)

            await eventually(failed_once, what="a model call failed by the token store")
            early = await all_records(harness.client, run, harness.scope)
            settled = [r.reason for r in early if isinstance(r, RunSettled)]
            assert not settled, settled  # the Run must not end over the outage
            await gate.open()
            result = await harness.client.result(run, scope=harness.scope)
            records = await all_records(harness.client, run, harness.scope)
    finally:
        await tokens.aclose()

    assert result.status is RunStatus.COMPLETED, result.reason
    assert result.answer == "done"
    failed = [r for r in records if isinstance(r, ModelCallFailed)]
    assert failed and all(r.turn == 1 and r.transient for r in failed), failed
    for record in failed:
        assert "the S3 token store did not answer" in record.message, record.message
        assert str(gate.port) not in record.message and bucket not in record.message
    assert oauth_server.state()["token_requests"] == [{"client_id": CLIENT, "ok": True}]
