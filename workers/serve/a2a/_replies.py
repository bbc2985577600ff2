"""What a caller's message says: the input of a new task, or the reply to what an
input-required task asks.

Parts: text parts are the message's text (joined by blank lines); data parts must be
JSON objects; files (``raw``, ``url``) are refused, since a Run's input is text.

A reply to a question is the message's text. A reply to an approval is either a data
part ``{"approve": true|false, "note": "..."}`` or a text that is ``approve`` or
``deny``, optionally followed by ``:`` and a note (``deny: not this order``); anything
else is refused with the convention in the message, and the Run keeps waiting.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from a2a.types import Message, SendMessageRequest
from a2a.utils.errors import ContentTypeNotSupportedError, InvalidParamsError
from a2a.utils.proto_utils import validate_proto_required_fields
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message as ProtoMessage


@dataclass(frozen=True)
class Said:
    """The content of one message."""

    text: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Decision:
    """An approval's reply."""

    approve: bool
    note: str | None


def require_fields(params: ProtoMessage) -> None:
    """Refuse a request that lacks a field A2A marks required (as the SDK's own handler
    does), naming each, before anything reads it: a message with no role would start a
    Run, a SendMessage with no message would be refused for its missing messageId. And
    one whose ``historyLength`` is negative (as the SDK's handler refuses it; any other
    is taken, and a task carries no history: the README says why).

    Raises:
        InvalidParamsError: a required field is missing or empty, or ``historyLength`` is
            below 0.
    """
    sent = params.configuration if isinstance(params, SendMessageRequest) else params
    length = getattr(sent, "history_length", 0)  # left out: 0
    if length < 0:
        raise InvalidParamsError(
            f"historyLength {length} is negative: send 0 or more, or leave it out (a task "
            "here carries no history: what it asks and answers is its status and artifacts)"
        )
    try:
        validate_proto_required_fields(params)
    except InvalidParamsError as err:
        listed = (err.data or {}).get("errors") or []
        named = "; ".join(
            f"{item['field']}: {str(item['message']).rstrip('.').lower()}" for item in listed
        )
        raise InvalidParamsError(
            f"the request lacks what A2A requires: {named or err.message}"
        ) from err


def read_message(message: Message) -> Said:
    """The text and data of ``message``.

    Raises:
        ContentTypeNotSupportedError: a file part.
        InvalidParamsError: a data part that is not an object, or two that set one key.
    """
    texts: list[str] = []
    data: dict[str, Any] = {}
    for index, part in enumerate(message.parts):
        kind = part.WhichOneof("content")
        if kind == "text":
            texts.append(part.text)
        elif kind == "data":
            value = _whole(MessageToDict(part.data))
            if not isinstance(value, dict):
                raise InvalidParamsError(f"message part {index}: a data part must be an object")
            clash = sorted(set(value) & set(data))
            if clash:
                raise InvalidParamsError(f"message part {index}: {clash[0]!r} is set twice")
            data.update(value)
        else:
            raise ContentTypeNotSupportedError(
                f"message part {index}: {kind or 'empty'} parts are not accepted; send text "
                "or a JSON object"
            )
    return Said("\n\n".join(t for t in texts if t), data)


def _whole(value: Any) -> Any:
    """``value`` with integral numbers as ints: protobuf carries every JSON number as a
    double, and ``{"order": 42}`` should reach the agent as it was sent, not as 42.0."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _whole(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole(v) for v in value]
    return value


def task_input(said: Said) -> str:
    """The input of a new task: its text, then its data as JSON.

    Raises:
        InvalidParamsError: the message is empty.
    """
    pieces = [said.text] if said.text else []
    if said.data:
        pieces.append(json.dumps(said.data, ensure_ascii=False, sort_keys=True))
    if not pieces:
        raise InvalidParamsError("the message has no text or data for the agent")
    return "\n\n".join(pieces)


def answer_text(said: Said) -> str:
    """The answer to a question.

    Raises:
        InvalidParamsError: the message has no text.
    """
    text = said.text.strip() or str(said.data.get("answer", "")).strip()
    if not text:
        raise InvalidParamsError(
            'the task asks a question: answer it with a text part (or {"answer": ...})'
        )
    return text


_CONVENTION = (
    "the task asks for an approval: reply 'approve' or 'deny' (optionally 'deny: <note>'), "
    'or with a data part {"approve": true|false, "note": "..."}'
)


def decision(said: Said) -> Decision:
    """The approval or denial a message gives.

    Raises:
        InvalidParamsError: it gives neither (the message says how to reply).
    """
    if "approve" in said.data:
        approve = said.data["approve"]
        note = said.data.get("note")
        if not isinstance(approve, bool) or not (note is None or isinstance(note, str)):
            raise InvalidParamsError(f"{_CONVENTION} (approve a boolean, note a string)")
        return Decision(approve, note or None)
    word, _, note = said.text.strip().partition(":")
    verdict = word.strip().lower()
    if verdict not in ("approve", "deny"):
        raise InvalidParamsError(_CONVENTION)
    return Decision(verdict == "approve", note.strip() or None)
