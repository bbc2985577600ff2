"""A peer's answer as the model reads it: the task's state, the peer's message, and each
artifact (a large one stored as its own blob, shown as a handle ``read_tool_output``
reads, plus a preview; one whose metadata says ``cut_short``, as ``psych serve`` marks an
answer its model cut at its output limit, after a ``[runtime]`` note saying so). An
``input-required`` task names the question and how to answer.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from a2a.types.a2a_pb2 import Artifact, Message, Part, Task, TaskState
from google.protobuf.json_format import MessageToDict

from psych_runtime.activities.contract import (
    A2A_MESSAGE_ARGUMENT,
    A2A_TASK_ARGUMENT,
    ToolOutcome,
)

PREVIEW_CHARS = 512
"""Characters of a large artifact shown next to its handle."""

TERMINAL = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_REJECTED,
    }
)
"""States a task never leaves."""
INTERRUPTED = frozenset({TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED})
"""States the peer waits in for its caller."""

_STATE_NAMES: dict[int, str] = {
    TaskState.TASK_STATE_SUBMITTED: "submitted",
    TaskState.TASK_STATE_WORKING: "working",
    TaskState.TASK_STATE_COMPLETED: "completed",
    TaskState.TASK_STATE_FAILED: "failed",
    TaskState.TASK_STATE_CANCELED: "canceled",
    TaskState.TASK_STATE_INPUT_REQUIRED: "input-required",
    TaskState.TASK_STATE_REJECTED: "rejected",
    TaskState.TASK_STATE_AUTH_REQUIRED: "auth-required",
}

Store = Callable[[bytes], Awaitable[str]]
"""Stores bytes as a blob, returning its ref (``BlobStore.put``)."""


@dataclass(frozen=True)
class Answer:
    """What one message to a peer produced, as the tool result."""

    status: Literal["ok", "error"]
    text: str
    sent: bool = True
    """False: the message provably never left (the peer's card could not be had, the
    message was malformed, its connection was refused: ``never_sent``)."""
    stored: tuple[str, ...] = ()
    """The refs of the artifacts stored as their own blobs, which ``text`` names as
    handles (``ToolOutcome.handles``: the Run's own to read)."""


def with_handles(outcome: ToolOutcome, answer: Answer) -> ToolOutcome:
    """``outcome``, the stored ``answer``, naming the artifacts stored as their own blobs
    (``ToolOutcome.handles``), so the Run reads them as its own."""
    if not answer.stored:
        return outcome
    return outcome.model_copy(update={"handles": answer.stored})


def state_name(state: int) -> str:
    """The protocol's name of a task state (``working``, ``input-required``, ...)."""
    return _STATE_NAMES.get(state, "unknown")


def part_text(part: Part) -> str:
    """One part as text: text as is, data as JSON, a file by name, type and where."""
    kind = part.WhichOneof("content")
    if kind == "text":
        return part.text
    if kind == "data":
        return json.dumps(MessageToDict(part)["data"], sort_keys=True)
    name = part.filename or "file"
    media = f", {part.media_type}" if part.media_type else ""
    if kind == "url":
        return f"[file {name}{media}: {part.url}]"
    if kind == "raw":
        return f"[file {name}{media}: {len(part.raw)} bytes, not shown]"
    return ""


def parts_text(parts: Iterable[Part]) -> str:
    """Parts joined by newlines."""
    return "\n".join(text for text in (part_text(p) for p in parts) if text)


def question_text(parts: Iterable[Part]) -> str:
    """A peer's question as a person reads it: its text parts when it has any (a peer
    may add data for programs beside them, as ``psych serve`` adds the pending item),
    else every part as ``parts_text`` shows it."""
    listed = list(parts)
    texts = [p for p in listed if p.WhichOneof("content") == "text"]
    return parts_text(texts or listed)


def _cut_short(artifact: Artifact) -> bool:
    """Whether the peer marks ``artifact`` cut at its model's output limit: metadata
    ``{"cut_short": true}``, as ``psych serve`` marks a Run's answer whose reason says so."""
    value = artifact.metadata.fields.get("cut_short")
    return value is not None and value.WhichOneof("kind") == "bool_value" and value.bool_value


async def _artifact(artifact: Artifact, limit: int, store: Store) -> tuple[str, str | None]:
    """The artifact as the model reads it, and the ref it was stored under (None: shown
    whole)."""
    title = artifact.name or artifact.artifact_id or "artifact"
    # Before the artifact, so the model reads it even when only a preview is shown.
    note = (
        f'[runtime] Artifact "{title}" was cut short: the peer\'s model stopped at its output '
        "token limit, so it is incomplete and may stop mid-sentence.\n"
        if _cut_short(artifact)
        else ""
    )
    body = parts_text(artifact.parts)
    data = body.encode()
    if len(data) <= limit:
        return f'{note}Artifact "{title}":\n{body}', None
    ref = await store(data)
    preview = body[:PREVIEW_CHARS]
    return (
        f'{note}Artifact "{title}" is {len(data)} bytes, stored under handle {ref}; call '
        f'read_tool_output with handle "{ref}" to read it. It begins:\n{preview}'
    ), ref


async def answer_of_message(message: Message) -> Answer:
    """A peer that answered with a message (no task)."""
    return Answer("ok", parts_text(message.parts))


async def answer_of_task(
    task: Task,
    *,
    peer: str,
    tool: str,
    large_result_bytes: int,
    store: Store,
    credential: str | None = None,
) -> Answer:
    """The tool result of a task in any state (``credential``: the name of the one the
    Spec gives the peer, named in an ``auth-required`` error)."""
    state = task.status.state
    said = parts_text(task.status.message.parts) if task.status.HasField("message") else ""
    head = f"[peer {peer}: task {task.id}, state {state_name(state)}]"
    if state == TaskState.TASK_STATE_INPUT_REQUIRED:
        return Answer(
            "ok",
            f"{head}\nThe peer asks: {said or '(no question text)'}\nTo answer, call {tool} "
            f'again with {A2A_TASK_ARGUMENT} "{task.id}" and your reply as '
            f"{A2A_MESSAGE_ARGUMENT}.",
        )
    if state == TaskState.TASK_STATE_AUTH_REQUIRED:
        # Our rule: a peer's credential is resolved by name per Scope by the worker, never
        # handed over by the model or a person mid-Run (no secret enters a workflow
        # payload), so nothing this Run can do satisfies the request: the call fails.
        sent = f"credential {credential!r}" if credential is not None else "no credential"
        return Answer(
            "error",
            f"{head}\nA2A peer {peer!r} asks for authentication (auth-required) in task "
            f"{task.id}: {said or '(it gave no detail)'}\nThis agent sent it {sent}, as "
            "configured; it cannot give other credentials during a Run (the operator "
            "configures each peer's credential by name), so the task was canceled at the "
            "peer. Tell the user what the peer asked for; do not retry the task.",
        )
    if state not in TERMINAL:
        return Answer(
            "error",
            f"{head}\nThe peer did not finish the task within this call"
            + (f": {said}" if said else "."),
        )
    lines = [head]
    if said:
        lines.append(said)
    per_artifact = max(large_result_bytes // max(len(task.artifacts), 1), PREVIEW_CHARS)
    stored: list[str] = []
    for artifact in task.artifacts:
        shown, ref = await _artifact(artifact, per_artifact, store)
        lines.append(shown)
        if ref is not None and ref not in stored:
            stored.append(ref)
    status: Literal["ok", "error"] = "ok" if state == TaskState.TASK_STATE_COMPLETED else "error"
    return Answer(status, "\n\n".join(lines), stored=tuple(stored))
