"""One flow's dynamic client registration at an authorization server (``_registration``
says where registrations are kept and why): reading the registration's answer, the RFC 7592
management it offers, and the requests sent to the authorization server beside the SDK's
own, each through the tenant's egress as the registration went.

- ``Registering.answered`` reads the answer: a refusal, or an answer with no client the
  flow can use, ends the flow naming the server and what is wrong (``registration_refused``:
  never the answer's values, a minted ``client_secret`` among them). Usable means the SDK's
  own check too (``check_registration_usable``: a ``token_endpoint_auth_method`` the flow
  can apply, and the ``client_secret`` a secret method needs). A client the server created
  but the flow cannot use is deleted there when its answer offered management
  (``registration_access_token`` and ``registration_client_uri``), so no registration
  nobody uses is left behind; a failed deletion is logged naming the client, and the
  error says what became of it.
- ``Registering.discard`` deletes, the same way, the client a flow registered but left
  unused (another worker's registration was stored first); ``Registering.retire`` a
  stored client a registration replaced (registered for less scope than asked), with the
  management stored with it, once its grace has passed (``_retiring``,
  ``_stored_registration.retire_due``), telling whether a failure is worth a later try;
  a dropped client (unused, unusable) whose deletion failed for now is handed to ``keep``
  for a later flow to try again (a token store that cannot keep it: logged, never raised;
  a later try is told only once it was kept).
- ``Registering.probe`` asks the token endpoint whether it still knows a stored client
  (``_registration.still_known``).
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import httpx2
from mcp.client.auth import OAuthClientProvider, OAuthRegistrationError
from mcp.client.auth.oauth2 import check_registration_usable
from mcp.shared.auth import OAuthClientInformationFull
from pydantic import ValidationError
from pydantic_core import from_json

from psych_runtime.activities.egress import PURPOSE, Egress, Purpose
from psych_runtime.activities.mcp._retiring import RETIRE_ATTEMPTS, Retiring, unused
from psych_runtime.specs import PsychError

_log = logging.getLogger(__name__)

_SAID = 300
"""Most characters of an authorization server's ``error_description`` repeated."""

DISCARD_SECONDS = 10.0
"""How long the deletion of an unused registration, or the check that a stored client is
still known, may take (the flow waits for it)."""


_FOR_NOW = frozenset({408, 425, 429})
"""The statuses below 500 of a deletion that may succeed if tried later."""


@dataclass(frozen=True)
class Failed:
    """Why a ``DELETE`` of a client did not delete it, and whether trying it again later
    may (unreachable, or a 5xx, 408, 425 or 429: not a refusal of the request itself)."""

    said: str
    again: bool


@dataclass(frozen=True)
class Management:
    """The RFC 7592 management a registration answer offered: where its client is read,
    changed or deleted, and the bearer token that may (never logged; stored only in the
    registration's record, which the token store seals as it does the client's secret)."""

    client_id: str
    uri: str
    token: str = field(repr=False)


@dataclass
class Registering:
    """One flow's dynamic registration, for the tenant's egress: the management its answer
    offered (``answered``), and the deletion of its client when the flow cannot use it
    (``answered``) or another worker's registration was stored first (``discard``)."""

    egress: Egress
    tenant: str
    server: str
    """The MCP server's name in the Spec."""
    issuer: str
    offered: Management | None = None
    registered: str | None = None
    """The client id this flow's registration got (``answered``)."""
    asked: str | None = None
    """The scope this flow's registration request asked (``answered``; None: none)."""
    clock: Callable[[], float] = field(default=time.time, repr=False)
    """Now, in ``time.time()`` seconds (whether a probe mark has expired, ``_untrusted``;
    when a client was replaced and whether its grace has passed, ``_retiring``; tests
    inject theirs)."""
    keep: Callable[[Retiring], Awaitable[bool]] | None = field(default=None, repr=False)
    """Keeps a client this flow dropped, whose deletion failed for now, in the
    registration's record for a later flow to try again (``_oauth.StoredTokens`` sets it:
    ``_stored_registration.put_back``); whether it was kept (not: logged by it; a store
    failure raised, ``_kept``); None: no record (its deletion is tried once)."""

    async def answered(self, response: httpx2.Response) -> None:
        """Read a registration ``response``: refuse it (``registration_refused``), or keep
        the management it offers, if any. A client the server created but the flow cannot
        use is deleted there first, when its answer offered management (a failed deletion
        logged, and told in the error).

        Raises:
            OAuthRegistrationError: the authorization server refused the registration, or
                answered with no usable client (what became of it there named).
        """
        refused = await registration_refused(response, self.issuer)
        answer = _read(await response.aread())
        fields = ("client_id", "registration_client_uri", "registration_access_token")
        said = [answer.get(name) if isinstance(answer, dict) else None for name in fields]
        client_id, uri, token = (value if isinstance(value, str) else "" for value in said)
        self.offered = Management(client_id, uri, token) if uri and token else None
        self.registered = client_id or None
        sent = _read(response.request.content)
        scope = sent.get("scope") if isinstance(sent, dict) else None
        self.asked = scope if isinstance(scope, str) else None
        if refused is None:
            return
        if response.status_code in (200, 201):  # created there, but not usable here
            self.registered = None
            raise OAuthRegistrationError(f"{refused}; {await self._unusable_dropped(client_id)}")
        raise refused

    async def _unusable_dropped(self, client_id: str) -> str:
        """Delete the unusable client ``client_id`` this flow registered (its answer's
        management; one failed for now kept for a later flow, ``_dropped``); what became
        of it, for the error."""
        offered, self.offered = self.offered, None
        if offered is None:
            return "it stays registered there (its answer offered no RFC 7592 management)"
        named = (
            f"the unusable client {client_id or '(no client_id)'} of MCP server "
            f"{self.server!r} at the authorization server {self.issuer}"
        )
        failed, later = await self._dropped(named, offered)
        if failed is None:
            return "it was deleted there (RFC 7592)"
        said = f"deleting it at {offered.uri} failed: {failed.said}"
        if later:
            return f"it stays registered there for now: {said}; a later consent flow tries again"
        return f"it stays registered there: {said}"

    async def send(self, request: httpx2.Request) -> httpx2.Response:
        """Send ``request`` to the authorization server through the tenant's egress, as
        the SDK's registration went (its body read).

        Raises:
            Exception: what the egress or the transport raises (refused, unreachable).
        """
        purpose = Purpose("mcp_oauth", f"the authorization server of MCP server {self.server!r}")
        request.extensions[PURPOSE] = purpose
        timeout = httpx2.Timeout(DISCARD_SECONDS)
        async with self.egress.mcp_client(self.tenant, timeout=timeout) as http:
            return await http.send(request)

    async def probe(self, provider: OAuthClientProvider) -> httpx2.Response | None:
        """The token endpoint's answer to the provider's client asking with a code that
        cannot be valid (``invalid_client``: the server forgot the client; ``invalid_grant``:
        it knows it); None, logged naming the client, when there is no telling (no
        metadata, unreachable, refused by the egress, another answer)."""
        context = provider.context
        client, metadata = context.client_info, context.oauth_metadata
        uris = context.client_metadata.redirect_uris
        if client is None or metadata is None or not uris:  # neither is, when it registers
            return None
        data = {
            "grant_type": "authorization_code",
            "code": "psych-probe-" + secrets.token_urlsafe(24),
            "redirect_uri": str(uris[0]),
            "client_id": client.client_id,
            "code_verifier": secrets.token_urlsafe(48),
        }
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        data, headers = context.prepare_token_auth(data, headers)
        url = str(metadata.token_endpoint)
        try:
            response = await self.send(httpx2.Request("POST", url, data=data, headers=headers))
        except Exception as err:
            told = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
        else:
            answer = _read(response.content)
            error = answer.get("error") if isinstance(answer, dict) else None
            if response.status_code in (400, 401) and error in ("invalid_client", "invalid_grant"):
                return response
            told = f"HTTP {response.status_code}{_error_said(response.content)}"
        _log.warning(
            "could not tell whether the authorization server %s still knows the client %s "
            "of MCP server %r (its token endpoint %s: %s): the consent is asked with it",
            self.issuer,
            client.client_id,
            self.server,
            url,
            told,
        )
        return None

    async def discard(self, client_id: str) -> None:
        """Delete ``client_id``, registered by this flow and left unused, at the
        authorization server (RFC 7592 2.3: ``DELETE`` at its ``registration_client_uri``
        with its registration access token as the bearer), through the tenant's egress as
        the registration went. Best effort: a failure is logged naming the client, never
        raised (the flow goes on with the stored registration); one failed for now is kept
        for a later flow to try again (``_dropped``)."""
        offered, self.offered = self.offered, None
        left = (
            f"the unused client {client_id} (another worker's registration for MCP server "
            f"{self.server!r} was stored first) at the authorization server {self.issuer}"
        )
        if offered is None or offered.client_id != client_id:
            _log.info("%s stays registered: its registration offered no management", left)
            return
        await self._dropped(left, offered)

    async def _dropped(self, named: str, offered: Management) -> tuple[Failed | None, bool]:
        """Delete ``named``, a client this flow registered and no consent used, with the
        management its answer ``offered``; why it failed (None: deleted), and whether it
        was kept (``keep``, ``_kept``) for a later flow to try again: it failed for now, and
        the record took it. Kept dated a grace back (``_retiring.unused``): no consent link
        was built with it."""
        now = self.clock()
        failed = await self._delete(offered)
        if failed is None or not failed.again or self.keep is None:
            self._told(named, offered.uri, failed, 0)  # no record: tried once
            return failed, False
        return failed, await self._kept(named, offered, failed, self.keep, now)

    async def _kept(
        self,
        named: str,
        offered: Management,
        failed: Failed,
        keep: Callable[[Retiring], Awaitable[bool]],
        now: float,
    ) -> bool:
        """Keep ``named``, whose deletion with ``offered`` ``failed`` for now, for a later
        flow (``keep``); whether it was kept, logged either way. Never raised: a token store
        that cannot keep it (``PsychError``: it did not answer, refused the record, or
        other writers held it) leaves it registered there, logged naming the client, and
        the flow goes on (the registration stored is not at stake)."""
        try:
            kept = await keep(unused(offered.client_id, offered.uri, offered.token, now))
        except PsychError as err:
            _log.warning(
                "%s stays registered: deleting it at %s failed: %s, and the token store "
                "could not keep it for a later try (%s): it is not tried again",
                named,
                offered.uri,
                failed.said,
                f"{type(err).__name__}: {err}" if str(err) else type(err).__name__,
            )
            return False
        if kept:  # else ``keep`` logged why not
            self._told(named, offered.uri, failed, RETIRE_ATTEMPTS - 1)
        return kept

    async def retire(
        self, client_id: str, management: Management | None, tries_left: int = 0
    ) -> bool:
        """Delete ``client_id``, a stored client a registration replaced, that is due
        (``_retiring``), at the authorization server with the ``management`` stored with it
        (None: its answer offered none, or an earlier build stored none: logged when it is
        replaced), as ``discard`` does; whether a later flow should try again: its deletion
        failed for now (unreachable, a 5xx, 408, 425 or 429) and ``tries_left`` is not 0. Best
        effort: it stays registered there, logged naming it, never raised (the flow goes
        on with the client that replaced it); a refusal for good (another 4xx: already
        gone, or its management no longer good) is not tried again."""
        replaced = (
            f"the replaced client {client_id or '(no client_id)'} of MCP server "
            f"{self.server!r} at the authorization server {self.issuer}"
        )
        if management is None:
            _log.info(
                "%s stays registered: no RFC 7592 management was stored with it (its "
                "registration answer offered none, or a build before 12-06 stored it)",
                replaced,
            )
            return False
        return self._told(replaced, management.uri, await self._delete(management), tries_left)

    def _told(self, named: str, uri: str, failed: Failed | None, tries_left: int) -> bool:
        """Log what became of ``named``'s deletion at ``uri``; whether a later flow should
        try again (``retire``)."""
        if failed is None:
            _log.info("deleted %s", named)
            return False
        if not failed.again:
            _log.warning(
                "%s is not tried again: the authorization server refused its deletion at "
                "%s: %s (already gone, or its management no longer good)",
                named,
                uri,
                failed.said,
            )
            return False
        if tries_left <= 0:
            _log.warning(
                "%s stays registered: deleting it at %s failed: %s, and no try is left: it "
                "is not tried again",
                named,
                uri,
                failed.said,
            )
            return False
        _log.warning(
            "%s stays registered for now: deleting it at %s failed: %s; a later consent "
            "flow tries again (%d tries left)",
            named,
            uri,
            failed.said,
            tries_left,
        )
        return True

    async def _delete(self, offered: Management) -> Failed | None:
        """RFC 7592 2.3: ``DELETE`` at the client's ``registration_client_uri`` with its
        registration access token as the bearer, through the tenant's egress; None when the
        server deleted it, else why not (never raised)."""
        try:
            request = httpx2.Request(
                "DELETE", offered.uri, headers={"Authorization": f"Bearer {offered.token}"}
            )
            response = await self.send(request)
        except Exception as err:
            said = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
            return Failed(said, again=True)
        if response.is_success:
            return None
        status = response.status_code
        again = status >= 500 or status in _FOR_NOW
        return Failed(f"HTTP {status}{_error_said(response.content)}", again=again)


async def registration_refused(
    response: httpx2.Response, issuer: str
) -> OAuthRegistrationError | None:
    """The error of a registration ``response`` the authorization server refused (None:
    it registered a client the flow can use), naming the server, the endpoint, the status
    and the server's ``error`` and ``error_description`` (printable characters, bounded);
    or, a success whose client cannot be read or used, what is wrong with it, never its
    values (the SDK's message would quote the answer, a minted ``client_secret`` with it)."""
    body = await response.aread()
    if response.status_code in (200, 201):
        return _unusable(body, issuer, response.request.url)
    return OAuthRegistrationError(
        f"the authorization server {issuer} refused the dynamic client registration at "
        f"{response.request.url}: HTTP {response.status_code}{_error_said(body)}"
    )


async def client_refused(response: httpx2.Response) -> bool:
    """Whether a token endpoint's ``response`` refused the client itself (RFC 6749 5.2
    ``invalid_client``: unknown to the server, or its credentials no longer good)."""
    if response.status_code not in (400, 401):
        return False
    answer = _read(await response.aread())
    return isinstance(answer, dict) and answer.get("error") == "invalid_client"


def _error_said(body: bytes) -> str:
    """An OAuth error answer's ``error`` and ``error_description`` as repeated (printable
    characters, bounded), after a space; empty when the answer names no error."""
    answer = _read(body)
    if not isinstance(answer, dict):
        return ""
    error, description = answer.get("error"), answer.get("error_description")
    if not isinstance(error, str) or not error:
        return ""
    said = f" {_printable(error)}"
    if isinstance(description, str) and description:
        said += f": {_printable(description)}"
    return said


def _read(body: bytes) -> object:
    """An authorization server's JSON answer, None when it does not read as JSON. The SDK's
    parser (``from_json``), so an answer reads here as it does in the SDK's flow: one nested
    past its depth is a ValueError, where ``json.loads`` raises RecursionError, which would
    end the flow as no answer the server gave."""
    try:
        return from_json(body)
    except ValueError:
        return None


def _unusable(body: bytes, issuer: str, url: object) -> OAuthRegistrationError | None:
    answer = _read(body)
    if not isinstance(answer, dict):
        wrong = "the answer is not a JSON object"
    else:
        answer.pop("issuer", None)  # the SDK's own field: it drops it from an answer too
        try:
            client = OAuthClientInformationFull.model_validate(answer)
        except ValidationError as err:
            wrong = "; ".join(
                f"{'.'.join(str(part) for part in item['loc'])}: {item['msg']}"
                for item in err.errors(include_url=False, include_input=False)
            )
        else:
            try:  # its message names the method, never a value of the answer's secrets
                check_registration_usable(client)
                return None
            except OAuthRegistrationError as err:
                wrong = str(err)
    return OAuthRegistrationError(
        f"the authorization server {issuer} answered the dynamic client registration at "
        f"{url} with no usable client: {_printable(wrong)}"
    )


def _printable(text: str) -> str:
    # Not specs.printable, on purpose: an authorization server's words (its error, its
    # error_description, a registration it answered) are quoted in an error a Run records
    # and a person reads, so they are bounded (_SAID) and kept to one plain line: every
    # character Python would not print (controls, line breaks, format characters such as
    # the bidi overrides) is a space, since no escape of it tells the reader more.
    kept = "".join(char if char.isprintable() else " " for char in text)
    return kept if len(kept) <= _SAID else kept[:_SAID] + "..."
