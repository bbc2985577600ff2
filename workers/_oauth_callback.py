"""The OAuth redirect of an MCP server's ``authorization_code`` grant, where the operator
runs it: ``complete_authorization`` (a function), ``oauth_callback_app`` (an ASGI app to
mount in an application's own web app; ``psych serve`` mounts it at ``/oauth/callback``)
and ``psych oauth-callback --listen`` (which serves it).

The callback takes the redirect's ``code``, ``state`` and ``iss``, finds the Run waiting on
that ``state`` in the token store, leaves the code there for the Run and resumes it (the
``psych.resume`` update, reason authorization) through the Temporal client, as an approval
is resumed. A redirect that carries the authorization server's ``error`` instead (the
person refused: ``access_denied``, or another code, RFC 6749 4.1.2.1) answers the same
item refused (``approved=False``, the error and its description as the note), so the
Run's wait ends at once and what needed the token is told why. Either is taken only when
its RFC 9207 ``iss`` is the authorization server's the consent was asked of (present
where that server says it sends one): otherwise the page names the mismatch and the Run
goes on waiting (a mix-up: another server's redirect must not end or answer it). The Run's own
``psych.mcp.authorize`` activity then exchanges the code (the PKCE verifier never leaves
the store; ``activities/mcp/_consent.py``), or forgets the flow of a refusal. It needs the
token store the workers use (``token_store_from_env``: the same directory or bucket) and a
client of their Temporal namespace; no payload key, since it reads nothing sealed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from html import escape
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route
from temporalio.service import RPCError

from psych_runtime.activities.tokens import TokenStore
from psych_runtime.specs import AccessDenied, NotFound, Refused, Scope
from psych_runtime.workers._bounded import NotTakenInTime, bounded
from psych_runtime.workflows import (
    PsychClient,
    ResumeInput,
    SuspensionReason,
    UpdateEndedByTemporal,
)

if TYPE_CHECKING:
    from psych_runtime.activities.mcp import Waiting

CALLBACK_PATH = "/oauth/callback"
"""Where ``psych serve`` and ``psych oauth-callback`` listen for the redirect."""

RESUME_WAIT_SECONDS = 30.0
"""How long the callback waits for the Run's worker to take the resume (a person waits)."""

ERROR_CHARS = 64
"""The most of an authorization server's ``error`` the callback repeats (a code: RFC 6749
names them in a few words)."""
DESCRIPTION_CHARS = 300
"""The most of its ``error_description`` the callback repeats (to the person and the Run)."""

_UNPRINTABLE = re.compile(r"[^\x20-\x7e]")
"""What RFC 6749 4.1.2.1 does not allow in ``error`` and ``error_description``."""


@dataclass(frozen=True)
class Completed:
    """What the callback did: the Run it resumed (or why it could not, for the person)."""

    ok: bool
    message: str
    workflow_id: str | None = None


async def complete_authorization(
    client: PsychClient, store: TokenStore, query: Mapping[str, str]
) -> Completed:
    """Handle one redirect (its query parameters): leave the code, resume the Run.

    Never raises for what the redirect brought: an error the authorization server sent
    (``error``), a missing parameter, an unknown or used ``state``, or a Run that no longer
    waits are answers (``ok`` False) naming what is wrong, never a code or state.
    """
    from psych_runtime.activities.mcp import WrongIssuer, deliver_authorization, waiting_on

    state = query.get("state")
    refused = _refusal(query)
    if refused is not None:
        said = f"the authorization server refused: {refused}"
        if not state:
            return Completed(False, said)
        try:
            waiting = await waiting_on(store, state, query.get("iss"))
        except WrongIssuer as err:
            # Not that server's refusal (RFC 9207): the wait goes on, nobody is told.
            return Completed(False, f"a refusal arrived ({refused}), but {err}")
        except LookupError as err:
            return Completed(False, f"{said}; {err}")
        outcome = await _resume(client, waiting, refused)
        if outcome is None:
            return Completed(False, f"{said}; the Run was told", waiting.workflow_id)
        return Completed(False, f"{said}; {outcome.message}", waiting.workflow_id)
    code = query.get("code")
    if not code or not state:
        return Completed(False, "the redirect carries no code or no state")
    try:
        waiting = await deliver_authorization(store, code, state, query.get("iss"))
    except LookupError as err:
        return Completed(False, str(err))
    outcome = await _resume(client, waiting, None)
    return outcome or Completed(True, "authorized: the Run goes on", waiting.workflow_id)


def _refusal(query: Mapping[str, str]) -> str | None:
    """The authorization server's ``error`` and ``error_description``, as the person and
    the Run are told of them (None: the redirect carries no error). Only what RFC 6749
    allows in them, bounded: the page and the Run's record repeat them."""
    error = query.get("error")
    if error is None:
        return None
    code = _UNPRINTABLE.sub("?", error)[:ERROR_CHARS] or "(an empty error)"
    description = _UNPRINTABLE.sub("?", query.get("error_description") or "")
    description = description[:DESCRIPTION_CHARS].strip()
    return f"{code}: {description}" if description else code


async def _resume(client: PsychClient, waiting: Waiting, refused: str | None) -> Completed | None:
    """Answer the Run's item: authorized, or ``refused`` (None: the Run took it; else why
    it could not be answered, for the person)."""
    request = ResumeInput(
        reason=SuspensionReason.AUTHORIZATION,
        id=waiting.id,
        tenant=waiting.tenant,
        by="oauth-callback",
        approved=None if refused is None else False,
        note=None if refused is None else f"the authorization server answered {refused}",
    )
    try:
        resumed = client.resume(
            waiting.workflow_id,
            request,
            scope=Scope(tenant=waiting.tenant),
            update_timeout=timedelta(seconds=RESUME_WAIT_SECONDS),
        )
        await bounded(resumed, RESUME_WAIT_SECONDS)
    except (Refused, NotFound, AccessDenied) as err:
        return Completed(False, f"the Run could not be resumed: {err}", waiting.workflow_id)
    except NotTakenInTime:
        said = (
            f"the answer arrived, but no worker answered for the Run within "
            f"{RESUME_WAIT_SECONDS:g} s: the Run may go on if one takes it later"
        )
        return Completed(False, said, waiting.workflow_id)
    except UpdateEndedByTemporal as err:  # a CANCELLED under load: taken or not
        said = (
            f"the answer arrived, but Temporal ended the Run's update ({err.status.name}) "
            "before the Run answered it: the Run may go on if it was taken"
        )
        return Completed(False, said, waiting.workflow_id)
    except RPCError as err:
        said = f"the Run could not be resumed: Temporal refused ({err.status.name})"
        return Completed(False, said, waiting.workflow_id)
    return None


def oauth_callback_app(client: PsychClient, store: TokenStore) -> Starlette:
    """An ASGI app answering ``GET /oauth/callback`` (mount it where the Spec's
    ``redirect_uris`` point; ``psych serve`` includes it)."""
    return Starlette(routes=[oauth_callback_route(client, store)])


def oauth_callback_route(client: PsychClient, store: TokenStore) -> Route:
    """The callback as one route, for an app that has its own (``psych serve``)."""

    async def callback(request: Request) -> HTMLResponse:
        done = await complete_authorization(client, store, dict(request.query_params))
        title = "Authorized" if done.ok else "Not authorized"
        body = f"<!doctype html><title>{title}</title><h1>{title}</h1><p>{escape(done.message)}</p>"
        # No-store: the page answers a one-time code.
        return HTMLResponse(
            body, status_code=200 if done.ok else 400, headers={"Cache-Control": "no-store"}
        )

    return Route(CALLBACK_PATH, callback, methods=["GET"])
