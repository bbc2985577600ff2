"""The payloads of an MCP server asking for input (the 2026-07-28 protocol's
``input_required`` result): what the server asked, as the workflow shows it to a person,
and the answers the retried ``tools/call`` carries back."""

from __future__ import annotations

from typing import Any

from psych_runtime.activities.contract._base import _Payload


class McpQuestion(_Payload):
    """One input request of the server a person answers (a form or a URL to open)."""

    key: str
    """The server's key for the request (what the answer is sent back under)."""
    text: str
    """What the person is asked: the server's message, and for a form the fields it wants
    and how to answer them."""


class McpInputRequired(_Payload):
    """An ``input_required`` result: the server needs input before it completes the call.

    The call has not taken effect: the server answers this instead of a result, and
    completes the call only when the request is sent again with the answers.
    """

    requests: dict[str, dict[str, Any]]
    """The server's input requests as it sent them (JSON by key), echoed back with the
    answers so the worker that sends them reads each answer against its request."""
    request_state: str | None = None
    """The server's opaque ``requestState``, sent back verbatim."""
    questions: tuple[McpQuestion, ...] = ()
    """The requests a person answers, in the server's key order (requests the worker
    answers itself, such as ``roots/list``, are not among them)."""


class McpInputAnswers(_Payload):
    """What a retried ``tools/call`` sends back: the requests, the person's answers by key,
    and the server's ``requestState``."""

    requests: dict[str, dict[str, Any]]
    request_state: str | None = None
    answers: dict[str, str]
    """Key -> the person's answer text (a form's fields as a JSON object, or a bare value
    when the form has one field; ``decline`` or ``cancel`` refuse)."""
