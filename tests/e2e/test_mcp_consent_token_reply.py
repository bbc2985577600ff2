"""The ``authorization_code`` grant's exchange meeting a token response that is no OAuth
token response (the token under another name): the exchange's answer names what is wrong,
field by field, and quotes none of it, as a ``client_credentials`` token request's error
does (``ToldAuth``). Real Runs on the dev server against ``tests.mcp.consent_server`` on
loopback, whose ``/token`` answers what ``/control/token-reply`` set.

From a review: the exchange passed the SDK's message on (``OAuthTokenError`` is an
``OAuthFlowError``), pydantic's, which quotes the response and so the credential in it,
into the activity's answer (the Run's history) and the warning logs of the activity and
the workflow.
"""

from __future__ import annotations

import json

import pytest

from psych_runtime.activities import McpSettings
from psych_runtime.activities.tokens import LocalTokenStore
from tests.mcp.consent_fixture import CLIENT, consenting, follow

from ._waiting import is_waiting, only_pending, state_when
from .conftest import Harness
from .test_mcp_consent import WAIT, Callback, agent, consent_asked
from .test_upstream_secrets import payload_texts

pytestmark = pytest.mark.e2e

LEAKED = "tok-LEAK-0123456789abcdef"


async def test_a_malformed_token_response_to_the_exchange_is_named_without_its_content(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG", logger="psych_runtime")
    store = LocalTokenStore(harness.home / "tokens")
    async with consenting("streamable-http", harness.client, store) as pair:
        harness.settings.mcp = McpSettings(oauth_issuers={CLIENT: pair.server.issuer})
        spec = agent(pair.server, Callback(pair.callback_url), "consent-malformed").build()
        pair.server.set_token_reply(200, json.dumps({"token": LEAKED, "token_type": "Bearer"}))
        async with harness.worker():
            run = await harness.client.dispatch(spec, "who am I?", scope=harness.scope)
            item = await consent_asked(harness, run, harness.scope)
            assert item.question is not None
            page = await follow(item.question)
            assert page.status_code == 200, page.text
            # The exchange failed: the Run asks for a new consent.
            await state_when(
                harness.client,
                run,
                harness.scope,
                lambda state: is_waiting(state) and only_pending(state).id != item.id,
                what="a new consent to be asked",
                within=WAIT,
                unsettled=True,
            )
            handle = harness.env.client.get_workflow_handle(run.workflow_id)
            history = (await handle.fetch_history()).to_json()
            await harness.client.abort(run, scope=harness.scope, reason="done")
    texts = [history, *payload_texts(json.loads(history)), caplog.text]
    assert not [text for text in texts if "tok-LEAK" in text]
    answers = [
        json.loads(text)
        for text in payload_texts(json.loads(history))
        if text.startswith("{") and '"ok":false' in text.replace(" ", "")
    ]
    assert {
        "ok": False,
        "reason": (
            "the authorization server's token response is not an OAuth token response "
            "(access_token: Field required)"
        ),
    } in answers, answers
