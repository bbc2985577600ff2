"""A refusal of an MCP server's consent (``psych.resume``, reason ``authorization``,
``approved=False``) takes a note of at most ``MAX_CONSENT_NOTE_CHARS``: the Run repeats it
to the model at every later call of that server, in the reason of a Run it fails and across
continue-as-new. A longer one is refused (the update by the Run's validator and before
sending by ``PsychClient``; its signal twin ignored), and the item still waits. Until 12-08
a tenant's note of up to an update's 64 K characters was taken and shown to the model
whole, whatever the Run's ``large_result_bytes``. Real Runs on the dev server against
``tests.mcp.consent_server``, psych's worker on loopback; read from the fake model's
requests and the Runs' records."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from psych_runtime.activities import McpSettings
from psych_runtime.activities.tokens import LocalTokenStore
from psych_runtime.specs import AgentBuilder, AgentSpec, Refused
from psych_runtime.testing import Reply
from psych_runtime.workers._oauth_callback import DESCRIPTION_CHARS, ERROR_CHARS, _refusal
from psych_runtime.workflows import (
    RESUME,
    Pending,
    Resumed,
    ResumeInput,
    RunHandle,
    RunStatus,
    SuspensionReason,
)
from psych_runtime.workflows.contract._contract import MAX_CONSENT_NOTE_CHARS
from tests.mcp.consent_fixture import CLIENT, Consenting, consenting

from ._waiting import all_records
from .conftest import Harness
from .test_mcp_consent import Callback, consent_asked, oauth

pytestmark = pytest.mark.e2e

WAIT = 60.0
"""Wall seconds a Run gets to settle once its wait ended (the machine is shared)."""

LONG_NOTE = "".join(f"Reason {n:03d}: the CRM holds data under a legal hold.\n" for n in range(80))
SHORT_NOTE = "not this CRM, please"


@pytest.fixture
async def pair(harness: Harness) -> AsyncIterator[Consenting]:
    store = LocalTokenStore(harness.home / "tokens")
    async with consenting("streamable-http", harness.client, store) as consenting_pair:
        harness.settings.mcp = McpSettings(oauth_issuers={CLIENT: consenting_pair.server.issuer})
        yield consenting_pair


def _optional(pair: Consenting) -> AgentSpec:
    return (
        AgentBuilder("consent-optional")
        .model("fake-model")
        .mcp_server("crm", pair.server.url, oauth=oauth(Callback(pair.callback_url)), optional=True)
        .limits(large_result_bytes=1000)
        .build()
    )


def _refusal_of(item: Pending, harness: Harness, note: str) -> ResumeInput:
    return ResumeInput(
        reason=SuspensionReason.AUTHORIZATION,
        id=item.id,
        tenant=harness.scope.tenant,
        by="ops",
        approved=False,
        note=note,
    )


async def _told(harness: Harness, run: RunHandle) -> tuple[str, list[Resumed]]:
    """The Run's answer settled, what its model was told at the turn, and its resumes."""
    result = await asyncio.wait_for(harness.client.result(run, scope=harness.scope), WAIT)
    assert result.status is RunStatus.COMPLETED, result.reason
    records = await all_records(harness.client, run, harness.scope)
    (request,) = harness.fake.requests
    runtime = [m["content"] for m in request["messages"] if m["role"] == "user"][-1]
    return runtime, [r for r in records if isinstance(r, Resumed)]


async def test_a_consent_refusal_whose_note_is_over_its_bound_is_refused(
    harness: Harness, pair: Consenting
) -> None:
    harness.fake.enqueue(Reply.text("answered without the CRM"))
    async with harness.worker():
        run = await harness.client.dispatch(_optional(pair), "who am I?", scope=harness.scope)
        item = await consent_asked(harness, run, harness.scope)
        long = _refusal_of(item, harness, LONG_NOTE)
        # PsychClient refuses it before sending...
        with pytest.raises(Refused) as local:
            await harness.client.resume(run, long, scope=harness.scope)
        assert local.value.kind == "TooLarge"
        assert f"at most {MAX_CONSENT_NOTE_CHARS}" in str(local.value)
        # ... and so does the Run's validator, for a client that sends it anyway.
        handle = harness.env.client.get_workflow_handle(run.workflow_id)
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(RESUME, long)
        cause = refused.value.cause
        assert isinstance(cause, ApplicationError) and cause.type == "TooLarge", cause
        assert f"at most {MAX_CONSENT_NOTE_CHARS}" in str(cause)
        # The item still waits: a refusal within the bound is taken.
        await harness.client.resume(
            run, _refusal_of(item, harness, SHORT_NOTE), scope=harness.scope
        )
        runtime, resumed = await _told(harness, run)
    assert [(r.outcome, r.detail) for r in resumed] == [("rejected", SHORT_NOTE)]
    assert f"consent to MCP server 'crm' was refused ({SHORT_NOTE})" in runtime, runtime
    assert "legal hold" not in runtime


async def test_a_consent_refusal_by_signal_whose_note_is_over_its_bound_is_ignored(
    harness: Harness, pair: Consenting, caplog: pytest.LogCaptureFixture
) -> None:
    # A signal cannot be refused (``temporal workflow signal``): before, the Run took it and
    # the model was told the whole note.
    caplog.set_level("WARNING", logger="temporalio.workflow")
    harness.fake.enqueue(Reply.text("answered without the CRM"))
    async with harness.worker():
        run = await harness.client.dispatch(_optional(pair), "who am I?", scope=harness.scope)
        item = await consent_asked(harness, run, harness.scope)
        handle = harness.env.client.get_workflow_handle(run.workflow_id)
        await handle.signal(RESUME, _refusal_of(item, harness, LONG_NOTE))
        # Handled in order: the second is taken only if the first was ignored.
        await handle.signal(RESUME, _refusal_of(item, harness, SHORT_NOTE))
        runtime, resumed = await _told(harness, run)
    assert [(r.outcome, r.detail) for r in resumed] == [("rejected", SHORT_NOTE)]
    assert f"consent to MCP server 'crm' was refused ({SHORT_NOTE})" in runtime, runtime
    ignored = [r.getMessage() for r in caplog.records if "signal ignored" in r.getMessage()]
    assert any(f"at most {MAX_CONSENT_NOTE_CHARS}" in line for line in ignored), ignored


def test_the_oauth_callbacks_longest_note_is_within_the_bound() -> None:
    refused = _refusal({"error": "e" * (ERROR_CHARS + 9), "error_description": "d" * 999})
    assert refused is not None and len(refused) == ERROR_CHARS + 2 + DESCRIPTION_CHARS
    # As the callback words its note (``_resume``).
    assert len(f"the authorization server answered {refused}") <= MAX_CONSENT_NOTE_CHARS
