"""The egress policy on the ``authorization_code`` grant's exchange: a worker whose policy
refuses the authorization server when the person's consent arrives says whose
authorization server it refused, with the host and the rule, in the exchange's answer
(``psych.mcp.authorize``), not only that the exchange failed. Real Runs on the dev server
against ``tests.mcp.consent_server`` with its issuer named ``localhost`` (on loopback like
the rest), so a rule can deny it by name before any lookup."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest

from psych_runtime.activities import McpSettings
from psych_runtime.activities.egress import EgressRules, EgressSettings
from psych_runtime.activities.tokens import LocalTokenStore
from psych_runtime.specs import RunFailed
from tests.mcp.consent_fixture import CLIENT, consenting, follow

from .conftest import Harness
from .test_mcp_consent import WAIT, Callback, agent, consent_asked
from .test_upstream_secrets import payload_texts

pytestmark = pytest.mark.e2e


async def test_an_exchange_the_egress_policy_refuses_names_the_servers_authorization_server(
    harness: Harness,
) -> None:
    store = LocalTokenStore(harness.home / "tokens")
    tenant = harness.scope.tenant
    async with consenting("streamable-http", harness.client, store, as_host="localhost") as pair:
        harness.settings.mcp = McpSettings(oauth_issuers={CLIENT: pair.server.issuer})
        spec = agent(pair.server, Callback(pair.callback_url), "consent-refused").build()
        # Discovery is allowed (the suite's policy allows loopback and localhost): the
        # Run suspends for the person's consent.
        async with harness.worker():
            run = await harness.client.dispatch(spec, "who am I?", scope=harness.scope)
            item = await consent_asked(harness, run, harness.scope)
        # The worker that takes the consent refuses the authorization server by name.
        harness.settings = dataclasses.replace(
            harness.settings,
            egress=EgressSettings(
                rules=EgressRules.parse("127.0.0.1/32"),
                tenants={tenant: EgressRules.parse(deny="localhost")},
            ),
        )
        async with harness.worker():
            assert item.question is not None
            # The person's browser, on 127.0.0.1 (the server listens there, and the
            # test's client would try localhost's ::1 first).
            page = await follow(item.question.replace("//localhost:", "//127.0.0.1:", 1))
            assert page.status_code == 200, page.text
            with pytest.raises(RunFailed, match="the authorization server of MCP server 'crm'"):
                await asyncio.wait_for(harness.client.result(run, scope=harness.scope), WAIT)
            handle = harness.env.client.get_workflow_handle(run.workflow_id)
            history = json.loads((await handle.fetch_history()).to_json())
        # No token was issued: the refusal came before the token endpoint was reached.
        assert pair.server.state()["issued"] == []
    answers = [
        json.loads(text)
        for text in payload_texts(history)
        if text.startswith("{") and '"ok":false' in text.replace(" ", "")
    ]
    assert {
        "ok": False,
        "reason": (
            "the authorization server of MCP server 'crm': egress refused: localhost: "
            f"denied by tenant {tenant!r}'s rule host localhost"
        ),
    } in answers, answers
