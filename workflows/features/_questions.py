"""Questions: the ``ask_question`` built-in, offered when ``may_ask_questions``.

The call suspends the Run (a ``question`` item) until a person answers through
``psych.resume`` or ``question_expires_seconds`` pass; the answer is the call's result,
shown whole within ``large_result_bytes``, else stored by ``psych.tool.store_result`` and
shown as a handle with a preview, as any tool's large result (since the patch
``psych-answer-bounded``, asked only for such an answer: until 12-07 an answer of up to an
update's 256 KB reached the model whole, whatever the bound). Should the store fail
through its retries (the blob store down), the model reads the answer cut at the bound,
told why (``unstored``; since the patch ``psych-answer-unstored-read``): the Run goes on.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import ToolCallRequest, ToolDefinition
    from psych_runtime.workflows.contract._records import SuspensionReason
    from psych_runtime.workflows.kernel._feature import Builtin, Feature
    from psych_runtime.workflows.kernel._run_base import cause_text
    from psych_runtime.workflows.kernel._tool_result import (
        ToolResult,
        inline,
        over_bound,
        stored,
        unstored,
    )

ASK_QUESTION = ToolDefinition(
    name="ask_question",
    description=(
        "Ask the person you work for a question and wait for the answer. Use it only when "
        "you cannot go on without their input."
    ),
    parameters={
        "type": "object",
        "properties": {"question": {"type": "string", "description": "The question."}},
        "required": ["question"],
        "additionalProperties": False,
    },
)


class Questions(Feature):
    """``ask_question``: the pending item is the kernel's suspension; no state here."""

    name = "questions"

    def builtins(self) -> tuple[Builtin, ...]:
        return (Builtin("ask_question", self._offer, self._ask, executes=False),)

    def _offer(self) -> ToolDefinition | None:
        return ASK_QUESTION if self.run.suspension.may_ask_questions else None

    async def _ask(self, turn: int, call: ToolCallRequest, arguments: dict[str, Any]) -> ToolResult:
        question = arguments.get("question")
        # A Run recorded before suspended on it (its text '' or the value's repr): asked
        # only for such a call.
        if not (isinstance(question, str) and question.strip()) and workflow.patched(
            "psych-question-needs-text"
        ):
            got = "none" if question is None else repr(question)[:100]
            return inline(
                call,
                "error",
                f"ask_question needs 'question': the question to ask, as text (got {got}); "
                "nothing was asked",
            )
        answer = await self.run.suspend_call(
            call,
            SuspensionReason.QUESTION,
            self.run.suspension.question_expires_seconds,
            question=str(arguments.get("question", "")),
            arguments="",
        )
        text = answer.answer or ""
        limit = self.run.limits.large_result_bytes
        if over_bound(text, limit) and workflow.patched("psych-answer-bounded"):
            summary = f"store the answer {call.name} {call.id} returns"
            try:
                return await stored(call, text, limit, summary=summary)
            except ActivityError as err:
                # The blob store down through the store's retries: the model reads the
                # answer cut (since psych-answer-unstored-read, asked only then; a Run
                # recorded before failed).
                return unstored(
                    err,
                    lambda: workflow.patched("psych-answer-unstored-read"),
                    call,
                    "ok",
                    text,
                    limit,
                    cause_text(err),
                )
        return inline(call, "ok", text)
