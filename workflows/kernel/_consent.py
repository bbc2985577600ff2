"""A Run waiting for a person's consent to an MCP server's OAuth (``authorization_code``).

An activity that needs a token the Run's Scope does not hold fails with
``ErrorType.MCP_CONSENT_REQUIRED`` before anything reached the server's tool; its details
(``McpConsent``) name the server, the URL the person opens and the pending item's id. The
Run suspends on it (reason AUTHORIZATION, the approval expiry), the OAuth callback resumes
it, ``psych.mcp.authorize`` exchanges the code for a token, and the caller retries what
failed. A failed exchange or a token revoked later only means the retry suspends again.

A wait that ends without consent (it expired, or the Run was aborted) still calls
``psych.mcp.authorize``: with no code arrived it exchanges nothing and forgets the parked
flow (its PKCE verifier and client registration) and its index in the token store, so a
late callback is refused and nothing of it stays behind (if the code arrived at that very
moment, it is exchanged and the token kept for the Scope's next Run). Runs recorded
before that ended without the call (patch ``psych-consent-forget``, asked through the Run's
``patched``: ``RunBase.patched``).

A refusal (the authorization server redirected with ``error``, RFC 6749 4.1.2.1: the
callback answers the item ``approved=False``, its note naming the error) ends the wait at
once: the parked flow is forgotten as above, and the caller is told the refusal instead
of retrying: a tool call is settled rejected (the model reads why), a discovery fails the
Run (or, the server optional, leaves it out: a turn's model is told why). A Run recorded
before took such an answer as a consent: it had the code exchanged (none had arrived),
retried, and asked again (patch ``psych-consent-refused``, asked where a refusal
arrives). The refusal's note, told to the model at every later call of the server, is at
most ``MAX_CONSENT_NOTE_CHARS``: the Run's resume handlers refuse a longer one
(``consent_note_problem``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import (
        ErrorType,
        McpAuthorizeInput,
        McpConsent,
    )
    from psych_runtime.specs import Scope
    from psych_runtime.workflows.contract._records import Pending, SuspensionReason
    from psych_runtime.workflows.kernel import _activity_calls as calls
    from psych_runtime.workflows.kernel._outcome import Stop, failure_details
    from psych_runtime.workflows.kernel._suspensions import Suspensions, expires_at


def consent_of(err: ActivityError | ApplicationError) -> McpConsent | None:
    """The consent an activity's failure asks for (None: another failure). A local
    activity's failure reaches the workflow as the ``ApplicationError`` itself."""
    cause = err.__cause__ if isinstance(err, ActivityError) else err
    if not isinstance(cause, ApplicationError) or cause.type != ErrorType.MCP_CONSENT_REQUIRED:
        return None
    details = cause.details[0] if cause.details else None
    return failure_details(McpConsent, details, ErrorType.MCP_CONSENT_REQUIRED)


async def await_consent(
    suspensions: Suspensions,
    consent: McpConsent,
    *,
    call_id: str,
    seconds: float,
    run_id: str,
    scope: Scope,
    patched: Callable[[str], bool],
) -> str | None:
    """Suspend until the callback resumes ``consent``'s item, then have the code exchanged.

    ``patched`` is the Run's ``RunBase.patched`` (asked here only when the wait ends without
    consent).

    Returns:
        None once the person consented (the caller retries); else why consent was refused,
        naming the server and the authorization server's error (the caller stops).

    Raises:
        Stop: ABANDONED when nobody consents within ``seconds``, ABORTED on an abort (the
            parked flow forgotten first).
    """
    authorize = McpAuthorizeInput(run_id=run_id, id=consent.id, scope=scope)
    standing = suspensions.consents_refused.get(consent.server)
    if standing is not None:
        # Refused earlier in this Run (a call that was under way then asks now): the
        # person is not asked again; the flow the activity parked is forgotten.
        await _forget(authorize)
        return standing
    try:
        answer = await suspensions.suspend(
            Pending(
                reason=SuspensionReason.AUTHORIZATION,
                id=consent.id,
                call_id=call_id,
                tool=consent.server,
                question=consent.url,
                expires_at=expires_at(seconds),
            ),
            seconds,
        )
    except Stop:
        if patched("psych-consent-forget"):
            await _forget(authorize)
        raise
    # Asked where a refusal arrived only (never by a consent), and straight from the SDK:
    # the update or signal that brings it resolves in its own task, never a local
    # activity's, so ``RunBase.patched``'s rule for older patches does not apply.
    if answer.approved is False and workflow.patched("psych-consent-refused"):
        said = answer.note or "no reason given"
        refused = f"consent to MCP server {consent.server!r} was refused ({said})"
        suspensions.consents_refused[consent.server] = refused
        await _forget(authorize)
        return refused
    done = await calls.authorize_mcp(authorize)
    if not done.ok:
        workflow.logger.warning("authorization %s was not exchanged: %s", consent.id, done.reason)
    return None


async def _forget(authorize: McpAuthorizeInput) -> None:
    """Have the parked flow of a wait that ended without consent forgotten. A failure is
    logged, not raised: the Run ends for the wait's reason (or is told the refusal) either
    way."""
    try:
        done = await calls.authorize_mcp(authorize)
    except ActivityError as err:
        if isinstance(err.__cause__, CancelledError):
            # The workflow is being cancelled (or force-settled): not a failure to forget.
            raise asyncio.CancelledError from err
        workflow.logger.warning(
            "authorization %s: forgetting its flow failed: %s", authorize.id, err.cause or err
        )
        return
    if done.ok:
        workflow.logger.info("authorization %s: its code arrived as the wait ended", authorize.id)
