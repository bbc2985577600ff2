"""An MCP server needs a person's consent: the exception an activity meets and the
``ApplicationError`` it becomes (no ``mcp`` SDK import: the model-call activity maps it
for an agent turn's discovery)."""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from psych_runtime.activities.contract import ErrorType, McpConsent


class McpConsentRequired(Exception):
    """A server needs a person's consent before this Scope holds a token for it.

    Attributes:
        server: the MCP server's name.
        url: the authorization URL the person opens.
        id: the pending item's id (what the callback resumes).
    """

    def __init__(self, server: str, url: str, id: str) -> None:
        super().__init__(f"MCP server {server!r} needs a person's consent: open {url}")
        self.server = server
        self.url = url
        self.id = id


def consent_error(err: McpConsentRequired) -> ApplicationError:
    """The activity's failure for ``err``: non-retryable, its details an ``McpConsent``
    (the workflow suspends on it; retrying the activity would only ask again)."""
    activity.logger.info("MCP server %s needs a person's consent", err.server)
    consent = McpConsent(server=err.server, url=err.url, id=err.id)
    return ApplicationError(
        str(err),
        consent.model_dump(mode="json"),
        type=ErrorType.MCP_CONSENT_REQUIRED,
        non_retryable=True,
        category=ApplicationErrorCategory.BENIGN,
    )
