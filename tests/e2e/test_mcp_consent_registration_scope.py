"""A dynamically registered client and the scope the flow asks (RFC 7591 2: ``scope`` is
client metadata, the values the client may ask for): the scope is the MCP server's (the
SDK asks what its protected-resource metadata names), known only after the registration
was read, so a stored client registered for less than the flow asks now is replaced by
one registered for both; one that covers it is kept. The replaced client stays
registered while a consent link built with it may still be followed (a Run suspended for
it completes), and is deleted at the authorization server, when its registration answer
offered RFC 7592 management (stored with the registration), by a consent flow after its
grace: a person whose token was issued to it then consents again, to the client that
replaced it, once its refresh is refused. Real Runs on the dev server against
``tests.mcp.consent_server --registration`` (whose authorization server refuses an
authorization asking a scope the client was not registered for), psych's worker and
callback on loopback."""

from __future__ import annotations

import asyncio
import json

import pytest

from psych_runtime.activities.mcp._retiring import RETIRE_GRACE_SECONDS
from psych_runtime.specs import Scope
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus
from tests.mcp.consent_fixture import record_files

from .conftest import Harness
from .test_mcp_consent import consent, consent_asked
from .test_mcp_consent_registration import (
    WAIT,
    agent,
    consented_run,
    expire_tokens,
    pair_with,
    stored,
)

pytestmark = pytest.mark.e2e


async def test_a_client_registered_for_less_than_the_scope_asked_is_replaced(
    harness: Harness,
) -> None:
    ann, bob = Scope(tenant="acme", principal="ann"), Scope(tenant="acme", principal="bob")
    carol = Scope(tenant="acme", principal="carol")
    for _ in range(3):
        harness.fake.enqueue(Reply.tool_calls(ToolCall("crm__whoami", {})), Reply.text("done"))
    async with pair_with(harness, "--registration") as pair:
        server = pair.server
        spec = agent(server, pair.callback_url).build()
        server.set_scopes(["crm.read"])
        async with harness.worker():
            await consented_run(harness, spec, ann)
            # The MCP server asks more from now on (a new release of it).
            server.set_scopes(["crm.read", "crm.write"])
            # Before the fix: Bob's consent was asked with the client registered for
            # crm.read, which the authorization server refuses (invalid_scope).
            bob_run = await consented_run(harness, spec, bob)
            bob_calls = (await harness.client.report(bob_run, scope=bob)).tool_calls
            # Carol's is asked with the client that covers it: none registered for her.
            carol_run = await consented_run(harness, spec, carol)
            carol_calls = (await harness.client.report(carol_run, scope=carol)).tool_calls
        registered = server.registered()
        authorized = server.consents()["authorized"]
    assert [item["scope"] for item in registered] == ["crm.read", "crm.read crm.write"]
    first, second = (item["client_id"] for item in registered)
    assert authorized == [first, second, second]
    assert [call.result for call in bob_calls + carol_calls] == [second, second]
    registrations = [r for r in stored(harness) if "token" not in r and "client" in r]
    assert [(r["client"]["client_id"], r["asked"]) for r in registrations] == [
        (second, "crm.read crm.write")
    ]


def age_retiring(harness: Harness, seconds: float) -> None:
    """Date the retiring clients of every stored registration ``seconds`` earlier (the
    worker's clock is the wall's: its grace passes so)."""
    for path in record_files(harness.home / "tokens"):
        record = json.loads(path.read_bytes())
        if "token" not in record and record.get("retiring"):
            for retiring in record["retiring"]:
                retiring["replaced_at"] -= seconds
            path.write_text(json.dumps(record))


def run_twice() -> list[Reply]:
    return [Reply.tool_calls(ToolCall("crm__whoami", {})), Reply.text("done")]


async def test_a_consent_link_built_with_a_replaced_client_still_completes_after_it(
    harness: Harness,
) -> None:
    ann, bob = Scope(tenant="acme", principal="ann"), Scope(tenant="acme", principal="bob")
    dan, eve = Scope(tenant="acme", principal="dan"), Scope(tenant="acme", principal="eve")
    async with pair_with(harness, "--registration", "--registration-management") as pair:
        server = pair.server
        spec = agent(server, pair.callback_url).build()
        server.set_scopes(["crm.read"])
        async with harness.worker():
            harness.fake.enqueue(*run_twice())
            await consented_run(harness, spec, ann)
            (first,) = (item["client_id"] for item in server.registered())
            (managed,) = [r for r in stored(harness) if "token" not in r and "client" in r]
            assert managed["management"]["uri"] == f"{server.issuer}/register/{first}"
            # Dan's Run suspends for consent: his link is built with the first client.
            dan_run = await harness.client.dispatch(spec, "who am I?", scope=dan)
            dan_asked = await consent_asked(harness, dan_run, dan)
            assert f"client_id={first}" in (dan_asked.question or "")
            server.set_scopes(["crm.read", "crm.write"])
            harness.fake.enqueue(*run_twice())
            await consented_run(harness, spec, bob)
            (_, second) = (item["client_id"] for item in server.registered())
            # Before the fix: the first client was deleted here, and Dan's link led to
            # the authorization server's error page, which never redirects back.
            assert server.deletions() == []
            harness.fake.enqueue(*run_twice())
            page = await consent(dan_asked)
            assert page.status_code == 200, page.text
            result = await asyncio.wait_for(harness.client.result(dan_run, scope=dan), WAIT)
            assert result.status is RunStatus.COMPLETED, result.reason
            assert server.deletions() == []
            # Its grace has passed: the next consent flow of the tenant deletes it there.
            age_retiring(harness, RETIRE_GRACE_SECONDS)
            harness.fake.enqueue(*run_twice())
            await consented_run(harness, spec, eve)
        assert server.deleted() == [first]
        registrations = [r for r in stored(harness) if "token" not in r and "client" in r]
        assert [r["retiring"] for r in registrations] == [[]]
        # Ann's token was issued to it: her refresh is refused (invalid_client), and she
        # consents again, to the client that replaced it.
        expire_tokens(harness, ann)
        harness.fake.enqueue(*run_twice())
        async with harness.worker():
            again = await consented_run(harness, spec, ann)
            calls = (await harness.client.report(again, scope=ann)).tool_calls
        authorized = server.consents()["authorized"]
        registered = [item["client_id"] for item in server.registered()]
    assert authorized == [first, second, first, second, second]
    assert [call.result for call in calls] == [second]
    assert registered == [first, second]
