"""Two Runs of a tenant that register the same client dynamically at once (RFC 7591):
the registration stored first stands, and the other Run takes it instead of its own, so
the tenant's people consent to one client. The client left unused is deleted at the
authorization server when its registration answer offered RFC 7592 management (a
``DELETE`` with its registration access token, through the tenant's egress); without
management it stays registered there; a deletion that fails is logged naming the client,
and the Run goes on. Real Runs on the dev server against ``tests.mcp.consent_server
--registration [--registration-management]``, psych's worker and callback on loopback;
the race is made certain through the workers' token store: the first registration to be
stored waits there until the second one is."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from psych_runtime.activities import McpSettings
from psych_runtime.activities.egress import EgressRules, EgressSettings
from psych_runtime.activities.mcp._registration import REGISTRATION
from psych_runtime.activities.tokens import Change, LocalTokenStore, TokenKey
from psych_runtime.specs import Scope
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus
from tests.mcp.consent_fixture import Consenting, consenting

from .conftest import Harness
from .test_mcp_consent import consent, consent_asked
from .test_mcp_consent_registration import WAIT, agent, stored

pytestmark = pytest.mark.e2e

ANN, BOB = Scope(tenant="acme", principal="ann"), Scope(tenant="acme", principal="bob")


class RacingStore(LocalTokenStore):
    """The workers' token store, where two registrations of one client race: the first to
    be stored (``put`` or ``update``) waits until a second one has been."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.first_waits = asyncio.Event()
        self.second_stored = asyncio.Event()

    async def _racing(self, key: TokenKey, write: Callable[[], Awaitable[None]]) -> None:
        if not key.client_id.startswith(REGISTRATION) or self.second_stored.is_set():
            await write()
        elif not self.first_waits.is_set():
            self.first_waits.set()
            await self.second_stored.wait()
            await write()
        else:
            await write()
            self.second_stored.set()

    async def put(self, key: TokenKey, record: bytes) -> None:
        await self._racing(key, functools.partial(LocalTokenStore.put, self, key, record))

    async def update(self, key: TokenKey, change: Change) -> None:
        await self._racing(key, functools.partial(LocalTokenStore.update, self, key, change))


@asynccontextmanager
async def racing(harness: Harness, *extra: str) -> AsyncIterator[Consenting]:
    store = LocalTokenStore(harness.home / "tokens")
    harness.settings.tokens = RacingStore(harness.home / "tokens")
    extra = ("--registration", *extra)
    async with consenting("streamable-http", harness.client, store, extra=extra) as pair:
        harness.settings.mcp = McpSettings(oauth_issuers={pair.server.url: pair.server.issuer})
        yield pair


async def race(harness: Harness, pair: Consenting) -> tuple[str, str]:
    """Ann's Run and Bob's register at once (Ann's registration reaches the store first,
    Bob's is stored first); each is consented to and completes. The loser's client id (the
    first registered) and the winner's, having checked that both Runs, their consents and
    the store use the winner's."""
    store = harness.settings.tokens
    assert isinstance(store, RacingStore)
    spec = agent(pair.server, pair.callback_url).build()
    harness.fake.enqueue(Reply.tool_calls(ToolCall("crm__whoami", {})), Reply.text("done ann"))
    harness.fake.enqueue(Reply.tool_calls(ToolCall("crm__whoami", {})), Reply.text("done bob"))
    asked: list[str] = []
    whoami: list[str | None] = []
    async with harness.worker():
        first = await harness.client.dispatch(spec, "who am I?", scope=ANN)
        await asyncio.wait_for(store.first_waits.wait(), WAIT)
        second = await harness.client.dispatch(spec, "who am I?", scope=BOB)
        items = [
            await consent_asked(harness, run, scope) for run, scope in [(first, ANN), (second, BOB)]
        ]
        for run, scope, item in [(first, ANN, items[0]), (second, BOB, items[1])]:
            assert item.question is not None
            asked += parse_qs(urlsplit(item.question).query)["client_id"]
            page = await consent(item)
            assert page.status_code == 200, page.text
            result = await asyncio.wait_for(harness.client.result(run, scope=scope), WAIT)
            assert result.status is RunStatus.COMPLETED, result.reason
            whoami += [
                call.result for call in (await harness.client.report(run, scope=scope)).tool_calls
            ]
    loser, winner = (item["client_id"] for item in pair.server.registered())
    # Before the fix: Ann's registration replaced Bob's in the store, and each Run asked
    # consent for (and used) its own client.
    assert asked == [winner, winner]
    assert pair.server.consents()["authorized"] == [winner, winner]
    assert whoami == [winner, winner]
    assert [r["client"]["client_id"] for r in stored(harness) if "token" not in r] == [winner]
    return loser, winner


async def test_the_registration_that_lost_the_store_is_deleted_at_the_server(
    harness: Harness,
) -> None:
    async with racing(harness, "--registration-management") as pair:
        loser, _ = await race(harness, pair)
        # Before the fix: nothing was deleted; the unused client stayed registered.
        assert pair.server.deleted() == [loser]
        assert pair.server.deletions() == [loser]


async def test_without_management_the_losing_registration_stays_and_is_not_used(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="psych_runtime.activities.mcp._registering")
    async with racing(harness) as pair:
        loser, _ = await race(harness, pair)
        assert pair.server.deletions() == []
    assert f"the unused client {loser} (another worker's registration" in caplog.text
    assert "stays registered: its registration offered no management" in caplog.text


async def test_a_deletion_the_egress_policy_refuses_is_logged_and_the_runs_go_on(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    # The registration is managed at localhost, which the tenant's egress refuses: the
    # deletion goes through the egress policy, as the registration did.
    harness.settings = dataclasses.replace(
        harness.settings,
        egress=EgressSettings(
            rules=EgressRules.parse("127.0.0.1/32"),
            tenants={ANN.tenant: EgressRules.parse(deny="localhost")},
        ),
    )
    caplog.set_level("INFO", logger="psych_runtime.activities.mcp._registering")
    async with racing(
        harness, "--registration-management", "--management-host", "localhost"
    ) as pair:
        loser, _ = await race(harness, pair)
        assert pair.server.deletions() == []
        issuer = pair.server.issuer
    assert (
        f"the unused client {loser} (another worker's registration for MCP server 'crm' was "
        f"stored first) at the authorization server {issuer} stays registered for now: "
        f"deleting it at http://localhost:"
    ) in caplog.text
    assert "a later consent flow tries again" in caplog.text
    assert "the authorization server of MCP server 'crm': egress refused: localhost" in caplog.text
    # Never the registration access token.
    assert "rat-" not in caplog.text
