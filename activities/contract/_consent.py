"""The payloads of an MCP server's ``authorization_code`` grant: the consent a Run waits
for (the details of an ``McpConsentRequired`` error) and the exchange the Run asks for
once the callback arrived (``psych.mcp.authorize``)."""

from __future__ import annotations

from psych_runtime.activities.contract._base import _Payload
from psych_runtime.specs import Scope


class McpConsent(_Payload):
    """A server needs a person's consent: the details of ``ErrorType.MCP_CONSENT_REQUIRED``.

    Attributes:
        server: the MCP server's name.
        url: the authorization URL the person opens (its ``state`` and PKCE challenge are
            public by design; the verifier stays sealed in the token store).
        id: the pending item's id, which the OAuth callback resumes.
    """

    server: str
    url: str
    id: str


class McpAuthorizeInput(_Payload):
    """Payload of ``psych.mcp.authorize``: exchange the code the callback left for ``id``."""

    run_id: str
    id: str
    scope: Scope


class McpAuthorized(_Payload):
    """Answer of ``psych.mcp.authorize``: the token is stored, or why not (no secret)."""

    ok: bool
    reason: str | None = None
