"""An MCP server asking for input before it completes a call (2026-07-28: the call's
outcome has status ``input_required``): a question suspension, then the call again with
the answers.

Each request a person answers is one ``question`` item of the Run (its id the call id, or
``<call id>-<n>`` when one round asks several), answered through the normal answer path
(``psych answer``, ``PsychClient.resume``, the HTTP API's answer route); the answers go
back to the server in the retried call (``McpToolCall.input``), and a server may ask again,
up to ``MAX_ROUNDS`` rounds.

Whether a person may be asked is the Spec's ``suspension.may_ask_questions``. When not,
nothing is sent back: the call ends as an error whose text is the server's question and
why nobody was asked, so the model can say what it needs (or call the tool in another way).

Exactly once: a round that ends in ``input_required`` is a finished activity whose outcome
is in history; it is never run again. The server has not acted on the call yet (it
answers ``input_required`` instead of a result, and keeps what it needs in the
``requestState`` it gets back), so the next round is the same call going on, not a
repeat: it is a new activity under the same rules as the first (a tool not safe to repeat
whose worker dies mid-round is UNKNOWN, never sent again).

Replay: the first round is scheduled exactly as before; only an ``input_required``
outcome, which no earlier worker returned, leads to the new commands (the suspension and
the next round), so histories recorded before this change replay unchanged and no
``workflow.patched`` is needed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import (
        McpInputAnswers,
        McpInputRequired,
        ToolCallRequest,
    )
    from psych_runtime.workflows.kernel._tool_result import ToolResult, inline

MAX_ROUNDS = 10
"""Most ``input_required`` rounds of one call (the official SDK's default bound)."""

Ask = Callable[[str, str], Awaitable[str]]
"""Ask a person: (pending item id, question) -> their answer."""
Retry = Callable[[McpInputAnswers], Awaitable[ToolResult]]
"""Send the call again with the answers."""


def asked(result: ToolResult) -> McpInputRequired | None:
    """What the server asks, when ``result`` is an ``input_required`` round."""
    outcome = result.outcome
    if outcome is None or outcome.status != "input_required":
        return None
    return outcome.input_required


async def answer_rounds(
    call: ToolCallRequest,
    first: McpInputRequired,
    *,
    may_ask: bool,
    ask: Ask,
    retry: Retry,
) -> ToolResult:
    """Ask, send the answers, and repeat while the server asks; the call's final result."""
    request = first
    for _ in range(MAX_ROUNDS):
        if request.questions and not may_ask:
            return inline(call, "error", not_asked(request))
        answers: dict[str, str] = {}
        several = len(request.questions) > 1
        for number, question in enumerate(request.questions, start=1):
            pending = f"{call.id}-{number}" if several else call.id
            answers[question.key] = await ask(pending, question.text)
        result = await retry(
            McpInputAnswers(
                requests=request.requests,
                request_state=request.request_state,
                answers=answers,
            )
        )
        again = asked(result)
        if again is None:
            return result
        request = again
    return inline(
        call,
        "error",
        f"the MCP server asked for input more than {MAX_ROUNDS} times; the call was given up",
    )


def not_asked(request: McpInputRequired) -> str:
    """The error the model reads when the server asks and no person may be asked."""
    questions = "\n\n".join(question.text for question in request.questions)
    return (
        "The MCP server needs input from a person before it completes this call, and this "
        "Run may not ask one (its Spec's suspension.may_ask_questions is false), so the call "
        f"was not completed. The server asked:\n\n{questions}"
    )
