"""Compaction: the ``psych.model.compact`` activity, the summariser call of a Run whose
Spec sets ``compaction``.

The workflow decides when and where to cut (``workflows/_compaction.py``); this activity
reads the conversation chain, has the model summarise everything before the cut (the
previous summary included), and stores a new chain: one node holding the summary message,
then one node holding the kept turns' messages by reference (their blobs are not copied).
The old chain stays in the BlobStore and every record of it stays in the log: compaction
changes what the model sees next, never what happened.

The summariser call goes through ``ModelActivities.complete`` (the same endpoints,
pricing, streaming, redaction, failure mapping and span), with its own system prompt
(``SUMMARISER_PROMPT`` plus ``summary_instructions``; the worker's context providers are
not asked: their blocks are for a turn's calls, and this one is none), no tools, the
output capped at ``max_summary_tokens``, and the messages to summarise rendered as one
transcript in a user message: the summariser is offered no tools, and a provider may
refuse tool calls and results in a request that defines none.
"""

from __future__ import annotations

from collections.abc import Sequence

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from psych_runtime.activities._activity_class import ActivityClass
from psych_runtime.activities.blobs import blob_words, unreadable_blob
from psych_runtime.activities.contract import (
    MODEL_COMPACT,
    ChatMessage,
    CompactInput,
    CompactResult,
    ErrorType,
    ModelCallInput,
    TurnMark,
    UnusedSummary,
)
from psych_runtime.activities.model._activities import ModelActivities
from psych_runtime.activities.model._failures import classify
from psych_runtime.activities.model._threads import chain_nodes
from psych_runtime.activities.model._wire import _heartbeating
from psych_runtime.activities.tools import complete_through_client

SUMMARISER_PROMPT = (
    "You summarise the earlier part of a conversation between a user, an AI assistant and "
    "the tools the assistant called, so that the assistant can carry on from your summary "
    "alone: the messages you summarise will no longer be shown to it. Keep the user's goals, "
    "requests and constraints; decisions taken and why; facts learned from tool results, "
    "with identifiers, numbers, names and dates exactly as they appeared; what was done; and "
    "what is still open. Drop greetings, repetition and anything later messages superseded. "
    "Write plain prose or short bullet points, in the language of the conversation. Do not "
    "answer the user, do not continue the conversation and do not call tools: write only "
    "the summary."
)
"""The summariser's own system prompt; ``CompactionPolicy.summary_instructions`` is
appended to it after a blank line."""

SUMMARY_HEADER = "[runtime] Summary of the earlier conversation, which it replaces:\n\n"
"""How the summary message (role ``user``) starts, so the model reads it as context, not
as a new request."""

CUT_OFF_NOTE = (
    "\n\n[runtime] This summary was cut off at its bound of {cap} tokens "
    "(compaction.max_summary_tokens): what it would have said next is lost."
)
"""Ends a summary the summariser's answer finished for ``length``."""

SUMMARY_PREVIEW_CHARS = 500
"""Characters of the summary a ``CompactionApplied`` record shows (the rest is in its
blob, ``summary_ref``)."""


def summariser_prompt(instructions: str | None) -> str:
    """The summariser's system prompt with ``instructions`` appended."""
    return SUMMARISER_PROMPT if not instructions else f"{SUMMARISER_PROMPT}\n\n{instructions}"


def transcript(messages: Sequence[ChatMessage]) -> str:
    """``messages`` as one text for the summariser, one block per message."""
    blocks: list[str] = []
    for message in messages:
        if message.role == "user" and message.content.startswith(SUMMARY_HEADER):
            blocks.append(
                "[summary of what came before]\n" + message.content.removeprefix(SUMMARY_HEADER)
            )
        elif message.role == "tool":
            blocks.append(f"[tool result {message.tool_call_id}]\n{message.content}")
        else:
            lines = [f"[{message.role}]"]
            if message.content:
                lines.append(message.content)
            lines += [
                f"[tool call {call.name} id={call.id}] {call.arguments}"
                for call in message.tool_calls
            ]
            blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def unpaired(before: Sequence[ChatMessage], after: Sequence[ChatMessage]) -> str | None:
    """What a cut between ``before`` and ``after`` would part (None: nothing).

    The model must never see a tool result without the assistant message that called it,
    nor a call without its result: a cut just before a turn start never parts them, and
    this checks it rather than trusting it.
    """
    called = {call.id for m in before if m.role == "assistant" for call in m.tool_calls}
    answered = {m.tool_call_id for m in before if m.role == "tool"}
    later = {m.tool_call_id for m in after if m.role == "tool"}
    parted = sorted(call for call in called - answered if call in later)
    if parted:
        return f"the cut parts tool calls from their results: {', '.join(parted)}"
    return None


def positions(nodes: Sequence[tuple[str, list[str]]], marks: Sequence[TurnMark]) -> list[int]:
    """Each mark as an index into the chain's messages.

    Raises:
        ApplicationError: a mark names no node of the chain, or an offset past its node.
    """
    starts: dict[str, tuple[int, int]] = {}
    total = 0
    for ref, messages in nodes:
        starts[ref] = (total, len(messages))
        total += len(messages)
    found: list[int] = []
    for mark in marks:
        if mark.node not in starts:
            raise _failed(f"turn mark {mark.node} is not a node of this conversation")
        start, size = starts[mark.node]
        if mark.offset > size:
            raise _failed(f"turn mark {mark.node}+{mark.offset} is past its node ({size})")
        found.append(start + mark.offset)
    if found != sorted(found):
        raise _failed(f"turn marks are out of order: {found}")
    return found


def _failed(message: str) -> ApplicationError:
    return ApplicationError(message, type=ErrorType.COMPACTION_FAILED, non_retryable=True)


class CompactionActivities(ActivityClass):
    """The summariser activity; it calls the model through a worker's ``ModelActivities``
    (register ``activities()`` next to that instance's)."""

    def __init__(self, model: ModelActivities) -> None:
        """Args:
        model: the model activities whose endpoints, pricing, HTTP client and
            conversations the summariser call shares.
        """
        self.model = model

    @activity.defn(name=MODEL_COMPACT)
    async def compact(self, input: CompactInput) -> CompactResult:
        """Summarise the conversation before ``input.marks[0]``; store the new chain.

        Raises:
            ApplicationError: type ``ModelCallFailed`` (the summariser call failed, details
                a ``ModelFailure``; or its summary could not be stored, the answer's
                ``UnusedSummary`` second: ``_paid_failure``) or ``CompactionFailed`` (the
                conversation cannot be read, a blob of it named by ref:
                ``unreadable_blob``; or cannot be compacted as asked; or the summary came
                back empty, details an ``UnusedSummary``: what the answer cost); never
                retried.
        """
        # Beats from the start to the summary stored, not only while the summariser's
        # request is open: the call's heartbeat timeout is the workflows worker's
        # outage_seconds plus the margin (10 s at 0), and reading a long conversation from
        # a slow store, the summariser's own input, must not look like a lost worker.
        async with _heartbeating():
            result = await self._compact(input)
        if self.model.outage_seconds > 0:
            # Paid for like any model answer: reported through the worker's client, whose
            # retries last the outage, rather than lost with the SDK's completion and the
            # summary bought again.
            complete_through_client(result, activity.info().activity_id, what="summariser call")
        return result

    async def _compact(self, input: CompactInput) -> CompactResult:
        """``compact``'s work, heartbeating."""
        conversations = self.model.conversations
        try:
            nodes = await chain_nodes(conversations.blobs, input.context_ref)
            messages = await conversations.messages(input.context_ref)
        except Exception as err:
            unreadable = unreadable_blob(err)
            if unreadable is None:
                raise
            # Recorded for the Run's caller by ref; where the store is (or the cipher's
            # words), for the operator, only in the worker's log.
            activity.logger.warning("compaction not made: %s%s", unreadable, blob_words(err))
            raise _failed(f"the conversation cannot be read: {unreadable}") from None
        refs = [ref for _, messages in nodes for ref in messages]
        found = positions(nodes, input.marks)
        cut = found[0]
        if not 0 < cut < len(refs):
            raise _failed(
                f"a cut at message {cut} of {len(refs)} leaves nothing to summarise or keep"
            )
        problem = unpaired(messages[:cut], messages[cut:])
        if problem is not None:
            raise _failed(problem)
        call = ModelCallInput(
            run_id=input.run_id,
            turn=input.turn,
            model=input.model,
            params=input.params.model_copy(
                update={
                    "model": input.model,
                    "max_output_tokens": input.max_summary_tokens,
                    "fallbacks": (),
                }
            ),
            system_prompt=summariser_prompt(input.instructions),
            new_messages=(ChatMessage(role="user", content=transcript(messages[:cut])),),
            stream_idle_seconds=input.stream_idle_seconds,
            scope=input.scope,
        )
        # The model activity's own code path, called in this activity's context: one
        # implementation of the request, the stream, redaction, pricing and failures.
        answer = await self.model.complete(call, remember=False, context=False)
        text = answer.text.strip()
        if not text:
            # Paid for all the same (a reasoning model can spend the whole output cap
            # before writing a word): the details say what, for the Run's totals.
            paid = UnusedSummary(usage=answer.usage, cost=answer.cost)
            usage = answer.usage
            spent = f"{usage.input_tokens} in / {usage.output_tokens} out tokens"
            if answer.finish_reason:
                spent = f"finish reason {answer.finish_reason}, {spent}"
            raise ApplicationError(
                f"the summariser ({answer.model}) returned an empty summary ({spent})",
                paid.model_dump(mode="json"),
                type=ErrorType.COMPACTION_FAILED,
                non_retryable=True,
            )
        preview = text[:SUMMARY_PREVIEW_CHARS]
        if answer.finish_reason == "length":
            # Cut off at its cap: kept (what it says is still the best context there is),
            # and said, so neither the model nor a reader takes it for the whole story.
            note = CUT_OFF_NOTE.format(cap=input.max_summary_tokens)
            text += note
            preview = preview[: SUMMARY_PREVIEW_CHARS - len(note)] + note
        summary = ChatMessage(role="user", content=SUMMARY_HEADER + text)
        try:
            summary_ref = await conversations.put_message(summary)
            first = await conversations.append(None, [summary_ref])
            head = await conversations.append(first, refs[cut:])
        except Exception as err:  # not chained: a store's own words may say where it is
            raise _paid_failure(
                err, answer.model, UnusedSummary(usage=answer.usage, cost=answer.cost)
            ) from None
        assert first is not None and head is not None  # both nodes hold messages
        return CompactResult(
            context_ref=head,
            marks=tuple(TurnMark(node=head, offset=at - cut) for at in found),
            summary_ref=summary_ref,
            summary_preview=preview,
            replaced=cut,
            model=answer.model,
            usage=answer.usage,
            cost=answer.cost,
            latency=answer.latency,
        )


def _paid_failure(err: Exception, model: str, paid: UnusedSummary) -> ApplicationError:
    """The failure of a summariser call whose answer came (and was billed) but whose
    summary could not be stored (a store that did not answer: ``StoreUnavailable``,
    transient): ``ModelCallFailed``, as the model activity fails after an answer, its
    details a ``ModelFailure`` (``classify``) then ``paid``, which the Run's totals count
    (``unused_summary``). Until 12-06 the store's error went as is, and the cost with it.
    The store's words (where it is) go to the worker's log only, as the model call's do."""
    failure = classify(err, model=model)
    activity.logger.warning("compaction not made: %s%s", failure.message, blob_words(err))
    return ApplicationError(
        failure.message,
        failure.model_dump(mode="json"),
        paid.model_dump(mode="json"),
        type=ErrorType.MODEL_CALL_FAILED,
        non_retryable=True,
        category=ApplicationErrorCategory.BENIGN,
    )
