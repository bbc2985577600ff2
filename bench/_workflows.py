"""The baseline workflows the benchmark measures AgentRun against, and their activities.

``BareLoop`` is the floor: a Temporal workflow that does nothing but the turn loop's
Temporal work (N turns of a trivial "model" activity and, optionally, a trivial "tool"
activity). ``ResultLoop`` is the history floor of section 3: the bare loop whose tool
returns ``result_bytes`` each turn (a hand-written workflow doing the same work as an
AgentRun whose tool returns that much, its conversation by reference).
``ConversationLoop`` is what Temporal agent integrations commonly do: every model-call
activity carries the whole conversation so far as its input. ``ModelLoop`` is the bare loop
whose "model" activity makes the request a model call makes (``_model_request``): a
streamed chat completion of the turn's conversation from the benchmark's fake model; what
it costs over the bare loop is the model call itself, not the runtime. ``StoringLoop`` is
ModelLoop doing the rest of a real turn's work by hand, as a workflow that keeps its
conversation by reference must: its model activity parses the streamed answer and stores
the assistant message and a conversation node, its tool activity stores the tool message
(three blob files a turn, as AgentRun's turn). ``LocalModelLoop`` is ModelLoop whose tool
activity is a local activity: the floor of a turn whose tool runs where the workflow task
runs (section 12 gives its model activity AgentRun's heartbeat timeout).

This module is imported inside the workflow sandbox, so it imports only the standard
library, ``temporalio`` and pydantic (a passthrough module of the psych plugin).
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel, ConfigDict
from temporalio import activity, workflow

BARE_LOOP = "bench.bare_loop"
RESULT_LOOP = "bench.result_loop"
CONVERSATION_LOOP = "bench.conversation_loop"
MODEL_ACTIVITY = "bench.model"
TOOL_ACTIVITY = "bench.tool"
CONVERSATION_MODEL_ACTIVITY = "bench.model_on_conversation"
RESULT_TOOL_ACTIVITY = "bench.tool_result"
MODEL_LOOP = "bench.model_loop"
LOCAL_MODEL_LOOP = "bench.local_model_loop"
MODEL_REQUEST_ACTIVITY = "bench.model_request"
STORING_LOOP = "bench.storing_loop"
STORING_MODEL_ACTIVITY = "bench.model_request_stored"
STORING_TOOL_ACTIVITY = "bench.tool_stored"

_TIMEOUT = timedelta(seconds=60)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LoopInput(_Frozen):
    """What a baseline loop does."""

    turns: int
    """Turns to take."""
    tool: bool = True
    """Whether each turn runs a tool activity after the model activity."""
    result_bytes: int = 16
    """Size of each tool result (``ConversationLoop``)."""
    heartbeat_seconds: float | None = None
    """``ModelLoop``: its model activity's heartbeat timeout, if any (AgentRun gives each
    model call one, so that a worker dying mid-call is noticed in seconds, not minutes)."""


class RequestTurn(_Frozen):
    """The input of the model-request activity: which turn of how many."""

    turn: int
    turns: int


class StoringTurn(_Frozen):
    """The input of ``StoringLoop``'s model activity: the turn, the conversation's head and
    the refs of the messages to append before the answer."""

    turn: int
    turns: int
    head: str | None
    new: tuple[str, ...]


class StoredAnswer(_Frozen):
    """What ``StoringLoop``'s model activity returns: the new head and the tool call."""

    head: str
    call_id: str | None
    tool: str | None
    arguments: str | None


class StoringToolCall(_Frozen):
    """The input of ``StoringLoop``'s tool activity."""

    turn: int
    call_id: str | None


class StoredResult(_Frozen):
    """What ``StoringLoop``'s tool activity returns: the result and its message's ref."""

    content: str
    message_ref: str


class ModelTurn(_Frozen):
    """The input of the conversation-carrying model activity: the whole conversation."""

    turn: int
    conversation: tuple[str, ...]


class ToolTurn(_Frozen):
    """The input of the result-producing tool activity."""

    turn: int
    result_bytes: int


@activity.defn(name=MODEL_ACTIVITY)
async def model_activity(turn: int) -> str:
    """A model call that costs nothing."""
    return f"call tool, turn {turn}"


@activity.defn(name=TOOL_ACTIVITY)
async def tool_activity(turn: int) -> str:
    """A tool call that costs nothing."""
    return f"tool result {turn}"


@activity.defn(name=CONVERSATION_MODEL_ACTIVITY)
async def model_on_conversation(input: ModelTurn) -> str:
    """A model call given the whole conversation, as its input."""
    return f"call tool, turn {input.turn}, after {len(input.conversation)} messages"


@activity.defn(name=RESULT_TOOL_ACTIVITY)
async def tool_result(input: ToolTurn) -> str:
    """A tool returning ``result_bytes`` of text that differ per turn."""
    stem = f"turn {input.turn}: "
    return stem + "x" * max(input.result_bytes - len(stem), 0)


BASELINE_ACTIVITIES = (model_activity, tool_activity, model_on_conversation, tool_result)


@workflow.defn(name=BARE_LOOP)
class BareLoop:
    """N turns of a trivial model activity and (optionally) a trivial tool activity."""

    @workflow.run
    async def run(self, input: LoopInput) -> int:
        """Take the turns; return how many were taken."""
        for turn in range(1, input.turns + 1):
            await workflow.execute_activity(
                MODEL_ACTIVITY, turn, result_type=str, start_to_close_timeout=_TIMEOUT
            )
            if input.tool:
                await workflow.execute_activity(
                    TOOL_ACTIVITY, turn, result_type=str, start_to_close_timeout=_TIMEOUT
                )
        return input.turns


@workflow.defn(name=RESULT_LOOP)
class ResultLoop:
    """N turns of a trivial model activity and a tool activity returning ``result_bytes``."""

    @workflow.run
    async def run(self, input: LoopInput) -> int:
        """Take the turns; return how many were taken."""
        for turn in range(1, input.turns + 1):
            await workflow.execute_activity(
                MODEL_ACTIVITY, turn, result_type=str, start_to_close_timeout=_TIMEOUT
            )
            await workflow.execute_activity(
                RESULT_TOOL_ACTIVITY,
                ToolTurn(turn=turn, result_bytes=input.result_bytes),
                result_type=str,
                start_to_close_timeout=_TIMEOUT,
            )
        return input.turns


@workflow.defn(name=CONVERSATION_LOOP)
class ConversationLoop:
    """N turns where the model activity's input is the whole conversation so far."""

    @workflow.run
    async def run(self, input: LoopInput) -> int:
        """Take the turns; return how many were taken."""
        conversation: list[str] = []
        for turn in range(1, input.turns + 1):
            answer = await workflow.execute_activity(
                CONVERSATION_MODEL_ACTIVITY,
                ModelTurn(turn=turn, conversation=tuple(conversation)),
                result_type=str,
                start_to_close_timeout=_TIMEOUT,
            )
            result = await workflow.execute_activity(
                RESULT_TOOL_ACTIVITY,
                ToolTurn(turn=turn, result_bytes=input.result_bytes),
                result_type=str,
                start_to_close_timeout=_TIMEOUT,
            )
            conversation += [answer, result]
        return input.turns


async def _request_model(input: LoopInput, turn: int) -> None:
    """ModelLoop's model request of ``turn``, in a workflow."""
    await workflow.execute_activity(
        MODEL_REQUEST_ACTIVITY,
        RequestTurn(turn=turn, turns=input.turns),
        result_type=str,
        start_to_close_timeout=_TIMEOUT,
        heartbeat_timeout=None
        if input.heartbeat_seconds is None
        else timedelta(seconds=input.heartbeat_seconds),
    )


@workflow.defn(name=MODEL_LOOP)
class ModelLoop:
    """The bare loop whose model activity requests a real (fake-model) chat completion."""

    @workflow.run
    async def run(self, input: LoopInput) -> int:
        """Take the turns; return how many were taken."""
        for turn in range(1, input.turns + 1):
            await _request_model(input, turn)
            await workflow.execute_activity(
                TOOL_ACTIVITY, turn, result_type=str, start_to_close_timeout=_TIMEOUT
            )
        return input.turns


@workflow.defn(name=LOCAL_MODEL_LOOP)
class LocalModelLoop:
    """ModelLoop whose tool activity is a local activity: the floor of a turn whose tool
    runs where the workflow task runs."""

    @workflow.run
    async def run(self, input: LoopInput) -> int:
        """Take the turns; return how many were taken."""
        for turn in range(1, input.turns + 1):
            await _request_model(input, turn)
            await workflow.execute_local_activity(
                TOOL_ACTIVITY, turn, result_type=str, start_to_close_timeout=_TIMEOUT
            )
        return input.turns


@workflow.defn(name=STORING_LOOP)
class StoringLoop:
    """ModelLoop keeping its conversation by reference, by hand (see the module)."""

    @workflow.run
    async def run(self, input: LoopInput) -> int:
        """Take the turns; return how many were taken."""
        head: str | None = None
        new: tuple[str, ...] = ()
        for turn in range(1, input.turns + 1):
            answer = await workflow.execute_activity(
                STORING_MODEL_ACTIVITY,
                StoringTurn(turn=turn, turns=input.turns, head=head, new=new),
                result_type=StoredAnswer,
                start_to_close_timeout=_TIMEOUT,
            )
            head = answer.head
            result = await workflow.execute_activity(
                STORING_TOOL_ACTIVITY,
                StoringToolCall(turn=turn, call_id=answer.call_id),
                result_type=StoredResult,
                start_to_close_timeout=_TIMEOUT,
            )
            new = (result.message_ref,)
        return input.turns
