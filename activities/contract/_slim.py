"""Between the full model and tool payloads and their slim forms on the hot path.

``psych.model.call`` and ``psych.tool.run_code`` carry only what the other side cannot
derive (issue 15). The workflow keeps working with ``ModelCallInput``, ``ModelCallResult``,
``CodeToolCall`` and ``ToolOutcome``; the activity keeps running them. These functions are
the one place that drops a field on one side and puts it back on the other, each pair
exact: ``full_*(slim_*(x)) == x``.

Pure (hashing and JSON only), so the workflow calls them too.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any, TypeVar

from pydantic import BaseModel

from psych_runtime.activities.contract._conversation import ChatMessage, ToolCallRequest
from psych_runtime.activities.contract._ids import WORKFLOW_ID_PREFIX, ids_from
from psych_runtime.activities.contract._model import ModelCallInput, ModelCallResult
from psych_runtime.activities.contract._refs import blob_ref
from psych_runtime.activities.contract._slim_payloads import (
    SlimCodeToolCall,
    SlimHttpToolCall,
    SlimModelCallInput,
    SlimModelCallResult,
    SlimToolOutcome,
    WireScope,
)
from psych_runtime.activities.contract._tools import CodeToolCall, HttpToolCall, ToolOutcome
from psych_runtime.specs import ModelRef, Scope

_M = TypeVar("_M", bound=BaseModel)


@cache
def _shared_fields(source: type[BaseModel], target: type[BaseModel]) -> tuple[str, ...]:
    return tuple(name for name in target.model_fields if name in source.model_fields)


def _carried(source: BaseModel, target: type[_M], **derived: Any) -> _M:
    """``target`` holding ``source``'s value of every field the two share by name, and
    ``derived`` (what the conversion drops, puts back or recomputes) in its place.
    ``test_slim`` pins which fields each pair shares and which are derived."""
    fields = {name: getattr(source, name) for name in _shared_fields(type(source), target)}
    return target(**(fields | derived))


def _wire_scope(scope: Scope, run_id: str, workflow_id: str) -> tuple[WireScope, str | None]:
    """The scope and run id to send: tenant and run id left out when the id names both."""
    named = ids_from(workflow_id) == (scope.tenant, run_id)
    wire = WireScope(
        tenant=None if named else scope.tenant, principal=scope.principal, labels=scope.labels
    )
    return wire, None if named else run_id


def _full_scope(scope: WireScope, run_id: str | None, workflow_id: str | None) -> tuple[Scope, str]:
    """The scope and run id a slim call stands for.

    Raises:
        ValueError: they were left out and ``workflow_id`` does not name them.
    """
    if scope.tenant is not None and run_id is not None:
        tenant = scope.tenant
    else:
        named = ids_from(workflow_id)
        if named is None:
            raise ValueError(
                f"the call carries no tenant and run id and its workflow id {workflow_id!r} "
                f"is not '{WORKFLOW_ID_PREFIX}<tenant>-<run id>': the workflow must send them"
            )
        tenant, run_id = named
    return Scope(tenant=tenant, principal=scope.principal, labels=scope.labels), run_id


# The workflow derives refs with these two functions on every replay, long after the
# activity checked them against what it stored. So they are FROZEN: the encoding of a
# message and of a conversation node as the stores wrote them at the baseline
# (``Conversations.put_message``, ``Conversations.append``, ``blobs.canonical_json``).
# Changing either would make a replayed Run derive heads that were never stored, and its
# next call fail on a missing blob. If the stores change, these stay: the activity then
# finds the derivation differs and sends the refs (bigger, never wrong); test_slim pins
# both to today's stores and ChatMessage's fields.


def _frozen_dumps(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _message_ref(
    role: str, content: str, tool_calls: tuple[ToolCallRequest, ...], call_id: str | None
) -> str:
    """The ref of a stored message with these fields (see the frozen note above)."""
    calls = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in tool_calls]
    message = {"role": role, "content": content, "tool_calls": calls, "tool_call_id": call_id}
    return blob_ref(_frozen_dumps(message))


def _inline_ref(message: ChatMessage) -> str:
    return _message_ref(message.role, message.content, message.tool_calls, message.tool_call_id)


# --- model call ---------------------------------------------------------------------------


def slim_model_input(call: ModelCallInput, workflow_id: str) -> SlimModelCallInput:
    """What the workflow sends ``psych.model.call`` for ``call`` (workflow side)."""
    scope, run_id = _wire_scope(call.scope, call.run_id, workflow_id)
    params = None if call.params == ModelRef(model=call.model) else call.params
    return _carried(call, SlimModelCallInput, params=params, run_id=run_id, scope=scope)


def full_model_input(slim: SlimModelCallInput, workflow_id: str | None) -> ModelCallInput:
    """The ``ModelCallInput`` a slim one stands for (activity side).

    Raises:
        ValueError: no tenant and run id were sent and ``workflow_id`` names none.
    """
    scope, run_id = _full_scope(slim.scope, slim.run_id, workflow_id)
    params = slim.params if slim.params is not None else ModelRef(model=slim.model)
    return _carried(slim, ModelCallInput, params=params, run_id=run_id, scope=scope)


def expected_refs(
    call: ModelCallInput, text: str, tool_calls: tuple[ToolCallRequest, ...]
) -> tuple[str, str | None]:
    """The conversation head and system prompt ref of ``call`` answered with ``text`` and
    ``tool_calls`` when nothing but the call's own messages entered the conversation (no
    thread, no MCP notes) and blobs are keyed by their plain bytes: what
    ``Conversations.append`` and ``BlobStore.put`` make of them."""
    return _expected_head(call, text, tool_calls), _expected_system_ref(call)


def _expected_head(call: ModelCallInput, text: str, tool_calls: tuple[ToolCallRequest, ...]) -> str:
    refs = [m if isinstance(m, str) else _inline_ref(m) for m in call.new_messages]
    refs.append(_message_ref("assistant", text, tool_calls, None))
    return blob_ref(_frozen_dumps({"parent": call.context_ref, "messages": refs}))


def _expected_system_ref(call: ModelCallInput) -> str | None:
    prompt = call.system_prompt
    return call.system_ref if prompt is None else blob_ref(prompt.encode())


def slim_model_result(result: ModelCallResult, call: ModelCallInput) -> SlimModelCallResult:
    """What ``psych.model.call`` returns for ``result`` (activity side): each ref
    left out only when it equals what ``expected_refs`` derives."""
    head, system_ref = expected_refs(call, result.text, result.tool_calls)
    return _carried(
        result,
        SlimModelCallResult,
        context_ref=None if result.context_ref == head else result.context_ref,
        system_ref=None if result.system_ref == system_ref else result.system_ref,
    )


def full_model_result(slim: SlimModelCallResult, call: ModelCallInput) -> ModelCallResult:
    """The ``ModelCallResult`` of ``call`` (workflow side): the model it called, and each
    ref ``expected_refs`` derives where the activity left it out (the head, which hashes
    the turn's messages, only then: a sealed store sends it)."""
    head = slim.context_ref
    if head is None:
        head = _expected_head(call, slim.text, slim.tool_calls)
    system_ref = slim.system_ref
    if system_ref is None:
        system_ref = _expected_system_ref(call)
    return _carried(
        slim, ModelCallResult, model=call.model, system_ref=system_ref, context_ref=head
    )


# --- code tool call -----------------------------------------------------------------------


def slim_code_call(call: CodeToolCall, workflow_id: str) -> SlimCodeToolCall:
    """What the workflow sends ``psych.tool.run_code`` for ``call`` (workflow side)."""
    scope, run_id = _wire_scope(call.scope, call.run_id, workflow_id)
    return _carried(call, SlimCodeToolCall, scope=scope, run_id=run_id)


def full_code_call(slim: SlimCodeToolCall, workflow_id: str | None) -> CodeToolCall:
    """The ``CodeToolCall`` a slim one stands for (activity side).

    Raises:
        ValueError: no tenant and run id were sent and ``workflow_id`` names none.
    """
    scope, run_id = _full_scope(slim.scope, slim.run_id, workflow_id)
    return _carried(slim, CodeToolCall, scope=scope, run_id=run_id)


def slim_http_call(call: HttpToolCall, workflow_id: str) -> SlimHttpToolCall:
    """What the workflow sends ``psych.tool.send_http`` for ``call`` (workflow side)."""
    scope, run_id = _wire_scope(call.scope, call.run_id, workflow_id)
    return _carried(call, SlimHttpToolCall, scope=scope, run_id=run_id)


def full_http_call(slim: SlimHttpToolCall, workflow_id: str | None) -> HttpToolCall:
    """The ``HttpToolCall`` a slim one stands for (activity side).

    Raises:
        ValueError: no tenant and run id were sent and ``workflow_id`` names none.
    """
    scope, run_id = _full_scope(slim.scope, slim.run_id, workflow_id)
    return _carried(slim, HttpToolCall, scope=scope, run_id=run_id)


def shown_whole(call_id: str, content: str) -> tuple[int, str, str]:
    """Size, result ref and message ref of a result shown whole: its UTF-8 size, the ref
    of its bytes, the ref of the tool message holding it (as ``store_outcome`` stores
    them through ``Conversations.put_message``)."""
    data = content.encode()
    return len(data), blob_ref(data), _message_ref("tool", content, (), call_id)


def slim_outcome(outcome: ToolOutcome) -> SlimToolOutcome:
    """What ``psych.tool.run_code`` returns for ``outcome`` (activity side): each of size
    and refs left out only when it equals what ``shown_whole`` derives from the content."""
    size, result_ref, message_ref = shown_whole(outcome.call_id, outcome.content)
    return _carried(
        outcome,
        SlimToolOutcome,
        size=None if outcome.size == size else outcome.size,
        result_ref=None if outcome.result_ref == result_ref else outcome.result_ref,
        message_ref=None if outcome.message_ref == message_ref else outcome.message_ref,
    )


def full_outcome(slim: SlimToolOutcome, call_id: str) -> ToolOutcome:
    """The ``ToolOutcome`` of call ``call_id`` (workflow side)."""
    size, result_ref, message_ref = slim.size, slim.result_ref, slim.message_ref
    if size is None or result_ref is None or message_ref is None:
        # Hashed only when something was left out (a truncated result sends them all).
        whole = shown_whole(call_id, slim.content)
        size = whole[0] if size is None else size
        result_ref = whole[1] if result_ref is None else result_ref
        message_ref = whole[2] if message_ref is None else message_ref
    return _carried(
        slim,
        ToolOutcome,
        call_id=call_id,
        size=size,
        result_ref=result_ref,
        message_ref=message_ref,
    )
