"""``psych report --transcript``: a Run's conversation as its model saw it.

Built from the Run's records alone (``build_transcript``, a pure function): the system
prompt and the input messages (``run_admitted``), each assistant message with its tool
calls (``model_call_finished``), each tool result as the model was shown it
(``tool_call_finished``) with the approvals, answers and completions it waited for
(``suspended``/``resumed``), and the messages that reached the model later: steering and
follow-ups, placed where the turn loop hands them to the model, and the runtime's note
when a tool is withheld, each compaction's summary where it replaced the older turns
for the model, and what later system prompts held besides the Run's own: the task list
after each change, and each call's per-turn context blocks (named and sized; their text is
stored by reference). A workflow's transcript is its steps, each agent step with its
child Run's transcript.

What records do not hold is said, not guessed: a result too large to show whole reached
the model as a preview behind a handle (the preview is shown, with its size and handle);
a compaction's summary is shown as far as its record's preview holds it (with the ref of the
stored whole);
the tool definitions offered and the exact wording of a withheld-tool note are not
recorded; a Run continuing a thread was first shown the end of the earlier Run's
conversation, which is that Run's transcript (named, not copied).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal, assert_never

from psych_runtime.specs import Scope
from psych_runtime.workflows import (
    AbortRequested,
    ChildSettled,
    ChildSpawned,
    CompactionApplied,
    CompactionFailed,
    ComponentShown,
    ContextProvided,
    McpDiscovered,
    ModelCallFailed,
    ModelCallFinished,
    ModelCallStarted,
    NextRunStarted,
    PeerDiscovered,
    PeerTaskCanceled,
    Pending,
    PsychClient,
    Record,
    Resumed,
    RunAdmitted,
    RunContinued,
    RunHandle,
    RunSettled,
    SteerReceived,
    SteerRefused,
    StepFinished,
    StepStarted,
    Suspended,
    SuspensionExpired,
    SuspensionReason,
    TasksUpdated,
    ToolCallFinished,
    ToolCallStarted,
    ToolWithheld,
    TurnStarted,
)


@dataclass(frozen=True)
class Wait:
    """Something a tool call waited for before its result: an approval, an answer, a
    completion, or a child Run."""

    reason: SuspensionReason
    outcome: Literal[
        "approved", "rejected", "answered", "completed", "authorized", "expired", "waiting"
    ]
    by: str | None = None
    detail: str | None = None
    """The approver's note, the answer, or the completion payload."""
    question: str | None = None


@dataclass(frozen=True)
class Message:
    """One message of the conversation, in the order the model received them."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str
    turn: int = 0
    """The turn whose model call first received it (0: before the first); for an
    assistant message, the turn that produced it."""
    origin: Literal[
        "input",
        "steer",
        "follow_up",
        "runtime",
        "compaction",
        "tasks",
        "context",
        "model",
        "tool",
        "system",
    ] = "input"
    by: str | None = None
    """Who sent a steering or follow-up message."""
    model: str | None = None
    """An assistant message's model; a compaction summary's summariser."""
    tool_calls: tuple[dict[str, str], ...] = ()
    """An assistant message's calls: ``{"id", "name", "arguments"}`` as the model sent them."""
    tool_call_id: str | None = None
    tool: str | None = None
    status: str | None = None
    """A tool result's status (``ok``, ``error``, ``rejected``, ...)."""
    waits: tuple[Wait, ...] = ()
    truncated: bool = False
    size: int = 0
    result_ref: str | None = None
    """A truncated result's handle; a compaction summary's stored message."""
    exact: bool = True
    """False when the model was shown more than ``content`` holds (a truncated result's
    handle and instructions, a withheld-tool note's wording, a compaction summary's
    header and whatever the record's preview of it leaves out)."""
    replaced: int = 0
    """A compaction summary: the messages it replaced for the model, those before turn
    ``cut_turn`` (a previous summary among them)."""
    cut_turn: int = 0


@dataclass(frozen=True)
class StepTranscript:
    """One workflow step: what it was given and gave, and its child Run's transcript."""

    index: int
    name: str
    kind: str
    input: Any = None
    ok: bool | None = None
    output: Any = None
    error: str | None = None
    child: Transcript | None = None


@dataclass(frozen=True)
class Transcript:
    """A Run's conversation (an agent) or its steps (a workflow)."""

    workflow_id: str
    agent: str
    kind: Literal["agent", "workflow"]
    status: str
    reason: str | None
    messages: tuple[Message, ...] = ()
    unseen: tuple[Message, ...] = ()
    """Steering or follow-up messages that arrived after the model's last call."""
    steps: tuple[StepTranscript, ...] = field(default=())
    thread: str | None = None
    """The earlier Run (workflow id) whose conversation the model was shown before the
    input, by reference: its messages are in that Run's records, not in these."""
    thread_bound: int | None = None
    """At most how many of the earlier Run's messages the model was shown (0: none; None:
    not recorded, a Run admitted before the record said)."""

    def chat_messages(self) -> list[dict[str, Any]]:
        """The messages in the chat-completions shape the model was sent them (a system
        prompt's later task list and per-turn context, no messages, left out)."""
        chat: list[dict[str, Any]] = []
        for message in self.messages:
            if message.origin in _PROMPT_PARTS:
                continue
            item: dict[str, Any] = {"role": message.role, "content": message.content}
            if message.tool_calls:
                item["content"] = message.content or None
                item["tool_calls"] = [
                    {
                        "id": call.get("id"),
                        "type": "function",
                        "function": {"name": call.get("name"), "arguments": call.get("arguments")},
                    }
                    for call in message.tool_calls
                ]
            if message.tool_call_id is not None:
                item["tool_call_id"] = message.tool_call_id
            chat.append(item)
        return chat


def _withheld_note(record: ToolWithheld, turn: int) -> Message:
    return Message(
        role="user",
        content=f"the tool {record.tool} failed {record.failures} times in a row and is "
        "withheld for the rest of this Run",
        turn=turn + 1,
        origin="runtime",
        exact=False,
    )


_PROMPT_PARTS = ("tasks", "context")
"""Origins of what a later system prompt held, which no message carried."""


def _task_list(record: TasksUpdated) -> Message:
    """From the next call on, the system prompt ends with this list (in place of the one
    before): written as the prompt writes it, but the prompt's wording is not recorded.
    Its turn is the next call's, set when that turn starts."""
    lines = [f"- [{task.status}] {task.title}" for task in record.tasks]
    return Message(
        role="system",
        content="\n".join(["Task list:", *lines]) if lines else "",
        origin="tasks",
        exact=False,
    )


def _context(record: ContextProvided) -> Message:
    """The providers' blocks one call's system prompt held (their text is by reference)."""
    return Message(
        role="system",
        content="\n".join(
            f"{block.provider}: {block.tokens} tokens"
            + (" (cut to its max_tokens)" if block.truncated else "")
            for block in record.shown
        ),
        turn=record.turn,
        origin="context",
        exact=False,
    )


def _before_answer(messages: list[Message], turn: int, message: Message) -> None:
    """Put ``message`` before the assistant message of ``turn`` (its model call's input)."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "assistant" and messages[index].turn == turn:
            messages.insert(index, message)
            return
    messages.append(message)


def _summary(record: CompactionApplied) -> Message:
    """Where the Run compacted: from the next turn on, the model saw this summary in place
    of the messages before ``cut_turn`` (which the transcript still shows, as it shows
    what the model saw until then)."""
    return Message(
        role="user",
        content=record.summary_preview,
        turn=record.turn + 1,
        origin="compaction",
        model=record.model,
        result_ref=record.summary_ref,
        exact=False,
        replaced=record.messages_replaced,
        cut_turn=record.cut_turn,
    )


def _steered(steer: SteerReceived, turn: int) -> Message:
    origin: Literal["steer", "follow_up"] = "steer" if steer.mode == "steer" else "follow_up"
    return Message(role="user", content=steer.message, turn=turn, origin=origin, by=steer.by)


def build_transcript(
    workflow_id: str,
    records: Sequence[Record],
    children: Mapping[str, Transcript] | None = None,
) -> Transcript:
    """A Run's transcript from its records (in seq order); ``children``: the transcripts
    of its steps' child Runs by workflow id."""
    admitted = next((r for r in records if isinstance(r, RunAdmitted)), None)
    messages: list[Message] = []
    if admitted is not None and admitted.system_prompt:
        messages.append(Message(role="system", content=admitted.system_prompt, origin="system"))
    for text in admitted.messages if admitted is not None else ():
        messages.append(Message(role="user", content=text, turn=1))
    # The turn loop hands steering to the model at the start of each turn, and steering
    # and follow-ups together when the model answers without tool calls; withheld-tool
    # notes follow the turn's tool results. Records are in the order the loop did this.
    queued: dict[str, list[SteerReceived]] = {"steer": [], "follow_up": []}
    notes: list[Message] = []
    task_list: Message | None = None
    waits: dict[str, list[Wait]] = {}
    held: dict[str, Pending] = {}
    turn = 0
    steps: dict[str, StepTranscript] = {}
    settled: RunSettled | None = None

    def take(into: int, *modes: str) -> None:
        for mode in modes:
            messages.extend(_steered(steer, into) for steer in queued[mode])
            queued[mode].clear()

    for record in records:
        match record:
            case SteerReceived():
                # A next_run message starts the next Run: this Run's model never sees it.
                if record.mode in queued:
                    queued[record.mode].append(record)
            case TurnStarted():
                turn = record.turn
                if task_list is not None:
                    messages.append(dataclasses.replace(task_list, turn=turn))
                    task_list = None
                messages.extend(notes)
                notes.clear()
                take(turn, "steer")
            case ModelCallFinished():
                messages.append(
                    Message(
                        role="assistant",
                        content=record.text,
                        turn=record.turn,
                        origin="model",
                        model=record.model,
                        tool_calls=record.tool_calls,
                    )
                )
                if not record.tool_calls:
                    take(record.turn + 1, "steer", "follow_up")
            case Suspended():
                held[record.pending.id] = record.pending
                waits.setdefault(record.pending.call_id, []).append(
                    Wait(
                        reason=record.pending.reason,
                        outcome="waiting",
                        question=record.pending.question,
                    )
                )
            case Resumed() | SuspensionExpired():
                pending = held.pop(record.id, None)
                if pending is not None:
                    _settle_wait(waits.get(pending.call_id, []), record)
            case ToolCallFinished():
                messages.append(
                    Message(
                        role="tool",
                        content=record.content,
                        turn=record.turn + 1,
                        origin="tool",
                        tool_call_id=record.call_id,
                        tool=record.tool,
                        status=record.status,
                        waits=tuple(waits.pop(record.call_id, [])),
                        truncated=record.truncated,
                        size=record.size,
                        result_ref=record.result_ref,
                        exact=not record.truncated,
                    )
                )
            case ToolWithheld():
                notes.append(_withheld_note(record, turn))
            case CompactionApplied():
                messages.append(_summary(record))
            case TasksUpdated():
                # Shown from the next call on; a Run that makes none never showed it.
                task_list = _task_list(record)
            case ContextProvided():
                if record.shown:
                    _before_answer(messages, record.turn, _context(record))
            case StepStarted():
                steps[record.step] = StepTranscript(
                    index=record.index,
                    name=record.step,
                    kind=record.step_kind,
                    input=record.input,
                    child=(children or {}).get(record.run or ""),
                )
            case StepFinished():
                begun = steps.get(record.step)
                steps[record.step] = StepTranscript(
                    index=begun.index if begun else len(steps) + 1,
                    name=record.step,
                    kind=record.step_kind,
                    input=begun.input if begun else None,
                    ok=record.ok,
                    output=record.output,
                    error=record.error,
                    child=(children or {}).get(record.run or "")
                    or (begun.child if begun else None),
                )
            case RunSettled():
                settled = record
            case RunAdmitted():
                pass  # the system prompt and the input: ``admitted`` above
            case (
                ModelCallStarted()
                | ModelCallFailed()
                | ToolCallStarted()
                | McpDiscovered()
                | PeerDiscovered()
                | PeerTaskCanceled()
                | AbortRequested()
                | SteerRefused()
                | NextRunStarted()
                | ChildSpawned()
                | ChildSettled()
                | ComponentShown()
                | CompactionFailed()
                | RunContinued()
            ):
                # No message of the conversation: a call's start or failure, what an MCP
                # server offered, an abort, a steer the Run did not take (no model saw
                # it), a next Run, a child's start and end (its result is the tool
                # result), what the user was shown (components), a failed compaction, a
                # continue-as-new.
                pass
            case _:
                assert_never(record)
    unseen = [_steered(steer, 0) for mode in ("steer", "follow_up") for steer in queued[mode]]
    kind = admitted.spec_kind if admitted is not None else "agent"
    return Transcript(
        workflow_id=workflow_id,
        agent=admitted.agent if admitted is not None else "?",
        kind=kind,
        status=settled.status if settled is not None else "running",
        reason=settled.reason if settled is not None else None,
        # A workflow talks to no model: its tool steps' calls are steps, not messages.
        messages=tuple(messages) if kind == "agent" else (),
        unseen=tuple(unseen) + tuple(notes) if kind == "agent" else (),
        steps=tuple(steps.values()),
        thread=admitted.thread.run if admitted is not None and admitted.thread else None,
        thread_bound=admitted.thread_bound if admitted is not None else None,
    )


def _settle_wait(waits: list[Wait], record: Resumed | SuspensionExpired) -> None:
    """Mark the call's open wait for ``record``'s item answered (or expired)."""
    for index, wait in enumerate(waits):
        if wait.outcome == "waiting" and wait.reason == record.reason:
            match record:
                case Resumed():
                    waits[index] = Wait(
                        reason=wait.reason,
                        outcome=record.outcome,
                        by=record.by,
                        detail=record.detail,
                        question=wait.question,
                    )
                case SuspensionExpired():
                    waits[index] = Wait(
                        reason=wait.reason, outcome="expired", question=wait.question
                    )
                case _:
                    assert_never(record)
            return


async def _records(
    client: PsychClient, workflow_id: str, scope: Scope, query_timeout: timedelta | None
) -> list[Record]:
    records: list[Record] = []
    while True:
        page = await client.records(
            workflow_id, scope=scope, after=len(records), limit=5000, query_timeout=query_timeout
        )
        records.extend(page.records)
        if not page.records or len(records) >= page.last_seq:
            return records


async def read_transcript(
    client: PsychClient,
    run: RunHandle | str,
    *,
    scope: Scope,
    query_timeout: timedelta | None = None,
) -> Transcript:
    """A Run's transcript, its steps' child Runs included, from the records it has now
    (each query waiting ``query_timeout`` at most; None: the client's default)."""
    workflow_id = run.workflow_id if isinstance(run, RunHandle) else run
    records = await _records(client, workflow_id, scope, query_timeout)
    children = {
        record.run: await read_transcript(
            client, record.run, scope=scope, query_timeout=query_timeout
        )
        for record in records
        if isinstance(record, StepStarted) and record.run is not None
    }
    return build_transcript(workflow_id, records, children)
