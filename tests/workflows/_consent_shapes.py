"""The recorded Run shapes of an MCP server's ``authorization_code`` grant: a Run suspended
for authorization (a person's consent), resumed by psych's OAuth callback, its code
exchanged (``psych.mcp.authorize``) and what needed the token retried.

Each takes ``record_histories``' rig (its client, fake model, worker settings and home)
and returns the Run whose history is committed; the consent server and the callback are
``tests.mcp.consent_fixture``'s, on loopback.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Protocol

from temporalio.client import Client
from temporalio.worker import Worker

from psych_runtime.activities import McpSettings
from psych_runtime.activities.tokens import LocalTokenStore
from psych_runtime.specs import AgentBuilder, McpOAuth, Scope, WorkflowSpec
from psych_runtime.testing import FakeModel, Reply, ToolCall
from psych_runtime.workers import WorkerSettings, run_worker
from psych_runtime.workflows import (
    RESUME,
    Pending,
    PsychClient,
    ResumeInput,
    RunHandle,
    SuspensionReason,
)
from tests.mcp.consent_fixture import CLIENT, Consenting, consenting, follow


class ConsentRig(Protocol):
    """What a shape needs of ``record_histories.Rig``."""

    client: PsychClient
    fake: FakeModel
    settings: WorkerSettings
    home: Path

    async def settle(self, run: RunHandle) -> None: ...

    async def suspended(self, run: RunHandle) -> Pending: ...

    def agent(self, name: str) -> AgentBuilder: ...


def _oauth(pair: Consenting) -> McpOAuth:
    return McpOAuth(
        grant="authorization_code",
        preregistered_client_id=CLIENT,
        redirect_uris=(pair.callback_url,),
    )


def _worker(
    rig: ConsentRig, temporal: Client, pair: Consenting
) -> AbstractAsyncContextManager[Worker]:
    settings = dataclasses.replace(
        rig.settings,
        tokens=LocalTokenStore(rig.home / "tokens"),
        mcp=McpSettings(oauth_issuers={CLIENT: pair.server.issuer}),
    )
    return run_worker(temporal, settings)


async def _consented(rig: ConsentRig, run: RunHandle) -> None:
    """Wait for the Run's authorization item, consent, and wait until the Run settles."""
    item = await rig.suspended(run)
    assert item.question is not None
    page = await follow(item.question)
    if page.status_code != 200:
        raise RuntimeError(f"the callback refused: {page.text}")
    await rig.settle(run)


async def _with_consent(
    rig: ConsentRig,
    temporal: Client,
    scope: Scope,
    body: Callable[[Consenting], Awaitable[RunHandle]],
) -> RunHandle:
    store = LocalTokenStore(rig.home / "tokens")
    async with (
        consenting("streamable-http", rig.client, store) as pair,
        _worker(rig, temporal, pair),
    ):
        return await body(pair)


async def mcp_authorization_at_turn(rig: ConsentRig, temporal: Client, scope: Scope) -> RunHandle:
    """The turn's discovery needs a token: suspended for authorization before the model
    call, resumed by the callback, the code exchanged, the model call made, the tool run."""

    async def body(pair: Consenting) -> RunHandle:
        rig.fake.enqueue(Reply.tool_calls(ToolCall("crm__whoami", {})), Reply.text("Done."))
        spec = rig.agent("consent").mcp_server("crm", pair.server.url, oauth=_oauth(pair)).build()
        run = await rig.client.dispatch(spec, "Who am I?", scope=scope)
        await _consented(rig, run)
        return run

    return await _with_consent(rig, temporal, scope, body)


async def mcp_authorization_at_call(rig: ConsentRig, temporal: Client, scope: Scope) -> RunHandle:
    """A token revoked after discovery: the tool call meets a 401 and suspends for
    authorization; resumed, the code exchanged, the call run again and answered. (A first
    Run gets the token and fills the worker's catalogue cache.)"""

    async def body(pair: Consenting) -> RunHandle:
        rig.fake.enqueue(
            Reply.tool_calls(ToolCall("crm__whoami", {})),
            Reply.text("First."),
            Reply.tool_calls(ToolCall("crm__whoami", {})),
            Reply.text("Second."),
        )
        spec = rig.agent("consent").mcp_server("crm", pair.server.url, oauth=_oauth(pair)).build()
        first = await rig.client.dispatch(spec, "Who am I?", scope=scope)
        await _consented(rig, first)
        pair.server.revoke_everything()
        run = await rig.client.dispatch(spec, "Who am I now?", scope=scope)
        await _consented(rig, run)
        return run

    return await _with_consent(rig, temporal, scope, body)


async def workflow_mcp_authorization(rig: ConsentRig, temporal: Client, scope: Scope) -> RunHandle:
    """A workflow tool step's discovery (``psych.mcp.list_tools``) needs a token: suspended
    for authorization, resumed, exchanged, discovered again and the step run."""

    async def body(pair: Consenting) -> RunHandle:
        flow = WorkflowSpec.model_validate(
            {
                "name": "consent-flow",
                "mcp_servers": [
                    {"name": "crm", "url": pair.server.url, "oauth": _oauth(pair).model_dump()}
                ],
                "steps": [{"kind": "tool", "name": "who", "tool": "crm__whoami"}],
            }
        )
        run = await rig.client.dispatch(flow, "Who?", scope=scope)
        await _consented(rig, run)
        return run

    return await _with_consent(rig, temporal, scope, body)


async def mcp_authorization_expired(rig: ConsentRig, temporal: Client, scope: Scope) -> RunHandle:
    """Nobody consents within the approval expiry: the Run settles ABANDONED after
    ``psych.mcp.authorize`` forgot the parked flow (patch ``psych-consent-forget``)."""

    async def body(pair: Consenting) -> RunHandle:
        spec = (
            rig.agent("consent")
            .mcp_server("crm", pair.server.url, oauth=_oauth(pair))
            .suspension(approval_expires_seconds=1)
        )
        run = await rig.client.dispatch(spec.build(), "Who am I?", scope=scope)
        await rig.suspended(run)
        await rig.settle(run)
        return run

    return await _with_consent(rig, temporal, scope, body)


async def _refused(rig: ConsentRig, run: RunHandle) -> None:
    """Wait for the Run's authorization item, refuse it at the authorization server (the
    consent server set to refuse), and wait until the Run settles."""
    item = await rig.suspended(run)
    assert item.question is not None
    page = await follow(item.question)
    if "the Run was told" not in page.text:
        raise RuntimeError(f"the callback did not answer the refusal: {page.text}")
    await rig.settle(run)


async def mcp_consent_refused_at_turn(rig: ConsentRig, temporal: Client, scope: Scope) -> RunHandle:
    """The turn's discovery needs a token and the person refuses (``access_denied``): the
    callback answers the item refused, the parked flow is forgotten (``psych.mcp.authorize``
    after the ``psych-consent-refused`` marker) and the Run, its server required, settles
    FAILED naming the refusal; no model call."""

    async def body(pair: Consenting) -> RunHandle:
        pair.server.refuse_consent("access_denied", "The user denied the request")
        spec = rig.agent("consent").mcp_server("crm", pair.server.url, oauth=_oauth(pair)).build()
        run = await rig.client.dispatch(spec, "Who am I?", scope=scope)
        await _refused(rig, run)
        return run

    return await _with_consent(rig, temporal, scope, body)


async def mcp_consent_refused_at_call(rig: ConsentRig, temporal: Client, scope: Scope) -> RunHandle:
    """A token revoked after discovery, and the person refuses the new consent: the tool
    call is settled rejected, the model told (patch ``psych-consent-refused``), the next
    turn made without the server, answered. (A first Run gets the token and fills the
    worker's catalogue cache.)"""

    async def body(pair: Consenting) -> RunHandle:
        rig.fake.enqueue(
            Reply.tool_calls(ToolCall("crm__whoami", {})),
            Reply.text("First."),
            Reply.tool_calls(ToolCall("crm__whoami", {})),
            Reply.text("The CRM is not available to me."),
        )
        spec = rig.agent("consent").mcp_server("crm", pair.server.url, oauth=_oauth(pair)).build()
        first = await rig.client.dispatch(spec, "Who am I?", scope=scope)
        await _consented(rig, first)
        pair.server.revoke_everything()
        pair.server.refuse_consent("access_denied", "The user denied the request")
        run = await rig.client.dispatch(spec, "Who am I now?", scope=scope)
        await _refused(rig, run)
        return run

    return await _with_consent(rig, temporal, scope, body)


async def mcp_consent_refused_optional_at_turn(
    rig: ConsentRig, temporal: Client, scope: Scope
) -> RunHandle:
    """The turn's discovery needs a token for an ``optional`` server and the person refuses
    (``access_denied``): the marker, the flow forgotten, the model call made again without
    the server, answered; that call carries a note telling the model (patch
    ``psych-consent-refused-note``: recorded before it as
    ``mcp_consent_refused_optional_at_turn``, with it as ``..._noted``)."""

    async def body(pair: Consenting) -> RunHandle:
        pair.server.refuse_consent("access_denied", "The user denied the request")
        rig.fake.enqueue(Reply.text("Answered without the CRM."))
        spec = (
            rig.agent("consent")
            .mcp_server("crm", pair.server.url, oauth=_oauth(pair), optional=True)
            .build()
        )
        run = await rig.client.dispatch(spec, "Who am I?", scope=scope)
        await _refused(rig, run)
        return run

    return await _with_consent(rig, temporal, scope, body)


async def mcp_consent_note_bounded(rig: ConsentRig, temporal: Client, scope: Scope) -> RunHandle:
    """An optional server's consent refused by signal with a 4,080-character note, then
    with a short one: behind ``psych-consent-note-bounded`` the first is ignored (its marker;
    over ``MAX_CONSENT_NOTE_CHARS``) and the second taken, the model told it; recorded
    before the patch (``..._before_patch``) the first was taken, told whole, the second
    ignored as an answer to an item no longer waiting."""

    async def body(pair: Consenting) -> RunHandle:
        rig.fake.enqueue(Reply.text("Answered without the CRM."))
        spec = (
            rig.agent("consent")
            .mcp_server("crm", pair.server.url, oauth=_oauth(pair), optional=True)
            .build()
        )
        run = await rig.client.dispatch(spec, "Who am I?", scope=scope)
        item = await rig.suspended(run)
        handle = temporal.get_workflow_handle(run.workflow_id)
        long = "".join(
            f"Reason {n:03d}: the CRM holds data under a legal hold.\n" for n in range(80)
        )
        for note in (long, "not this CRM, please"):
            refusal = ResumeInput(
                reason=SuspensionReason.AUTHORIZATION,
                id=item.id,
                tenant=scope.tenant,
                by="ops",
                approved=False,
                note=note,
            )
            await handle.signal(RESUME, refusal)
        await rig.settle(run)
        return run

    return await _with_consent(rig, temporal, scope, body)
