"""The model ``psych dev --fake-model`` serves: the scripted support model, or a user's script.

Both are served by ``psych_runtime.testing.FakeModel`` on loopback, so every ``psych``
command works on a machine with no model key and no network.

Without a file it is the scripted support model, which decides from the conversation it is
sent (as the demo's does): it finds the order in the user's message, calls
``lookup_order``, calls ``issue_refund`` for a delivered order, and answers in one sentence
built from the tool results; a system prompt asking to welcome a customer (the onboarding
workflow's greeter) gets a welcome. It answers the model id of the example Specs
(``gpt-4o-mini``).

A script file (``.json``, ``.yaml`` or ``.yml``) is a list of replies answered in order,
across every Run the dev server serves, or a mapping ``{models: [...], replies: [...]}``
naming the model ids it answers (default ``[gpt-4o-mini]``)::

    models: [gpt-4o-mini]
    replies:
      - tool_calls:
          - {name: lookup_order, arguments: {order_id: "42"}}
      - text: Order 42 is delivered.
      - error: {status: 503, message: overloaded}   # an HTTP error (5xx, 429: transient)

Once the replies are used up, every further call fails with HTTP 400 (not transient, so
the Run fails at once), naming the script.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from psych_runtime.specs import SpecError
from psych_runtime.testing import FakeModel, Reply, ToolCall

SCRIPTED_MODELS = ("gpt-4o-mini",)
"""The model ids the fake model answers unless a script names others: the example Specs'."""


# --- the scripted support model -----------------------------------------------------------


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def _object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _joined(messages: list[dict[str, Any]], role: str) -> str:
    return " ".join(_text(m.get("content")) for m in messages if m.get("role") == role)


def _support(messages: list[dict[str, Any]]) -> Reply:
    user = _joined(messages, "user")
    found = re.search(r"order\s*(?:#|number|no\.?)?\s*(\w+)", user, re.IGNORECASE)
    if found is None:
        return Reply.text("Which order is this about? Please give me its number.")
    order_id = found.group(1)
    called = {
        call.get("id"): call.get("function", {}).get("name")
        for m in messages
        if m.get("role") == "assistant"
        for call in m.get("tool_calls") or ()
    }
    results = {
        called.get(m.get("tool_call_id")): _text(m.get("content"))
        for m in messages
        if m.get("role") == "tool"
    }
    if "lookup_order" not in results:
        return Reply.tool_calls(ToolCall("lookup_order", {"order_id": order_id}))
    order = _object(results["lookup_order"])
    if order.get("status") != "delivered":
        return Reply.text(
            f"Order {order_id} is {order.get('status', 'unknown')}, so I cannot refund it yet."
        )
    if "issue_refund" not in results:
        reason = "arrived broken" if "broken" in user.lower() else "customer request"
        return Reply.tool_calls(ToolCall("issue_refund", {"order_id": order_id, "reason": reason}))
    refund = _object(results["issue_refund"])
    if not refund.get("refunded"):
        return Reply.text(f"I could not refund order {order_id}: {results['issue_refund'][:200]}")
    return Reply.text(
        f"I refunded order {order_id} ({order.get('total', 'the full amount')}); "
        f"refund {refund.get('refund_id', '')} is on its way to you."
    )


def scripted_support_model(body: dict[str, Any]) -> Reply:
    """The scripted support model's next reply to a chat-completions request body."""
    messages = [m for m in body.get("messages", []) if isinstance(m, dict)]
    if "Welcome the new customer" not in _joined(messages, "system"):
        return _support(messages)
    user = _joined(messages, "user")
    account = re.search(r'"account": "([\w-]+)"', user)
    name = re.search(r"Onboard (\w+)", user)
    who = name.group(1) if name else "there"
    where = f" Your account {account.group(1)} is ready." if account else ""
    return Reply.text(f"Welcome aboard, {who}!{where} Reply here whenever you need us.")


# --- a user's script ----------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Call(_Strict):
    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)


class _Error(_Strict):
    status: int = Field(ge=400, le=599)
    message: str = "scripted error"


class _Reply(_Strict):
    text: str | None = None
    tool_calls: list[_Call] | None = Field(default=None, min_length=1)
    error: _Error | None = None

    def reply(self, where: str) -> Reply:
        given = [name for name in ("text", "tool_calls", "error") if getattr(self, name)]
        if self.error is not None:
            if given != ["error"]:
                raise SpecError(f"{where}: an error reply has no text or tool_calls")
            return Reply.error(self.error.status, message=self.error.message)
        if self.tool_calls is not None:
            calls = [ToolCall(call.name, call.arguments) for call in self.tool_calls]
            return Reply.tool_calls(*calls, content=self.text or "")
        if self.text is None:
            raise SpecError(f"{where}: a reply needs text, tool_calls or error")
        return Reply.text(self.text)


class _Script(_Strict):
    models: list[str] = Field(default=list(SCRIPTED_MODELS), min_length=1)
    replies: list[_Reply] = Field(min_length=1)


def load_script(path: str | Path) -> tuple[tuple[str, ...], list[Reply]]:
    """The model ids and replies of a script file (format in the module docstring).

    Raises:
        SpecError: the file cannot be read or parsed, or a reply is malformed (naming it).
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
        data = json.loads(text) if file.suffix == ".json" else yaml.safe_load(text)
    except yaml.MarkedYAMLError as err:
        # One line, where PyYAML's own text spans several (the line quoted, a caret).
        mark = err.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise SpecError(
            f"cannot read the fake model's script {file}: {where}{err.problem}"
        ) from err
    except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError) as err:
        raise SpecError(f"cannot read the fake model's script {file}: {err}") from err
    if isinstance(data, list):
        data = {"replies": data}
    try:
        script = _Script.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the document"
        raise SpecError(f"{file}: {where}: {first['msg']}") from err
    replies = [
        reply.reply(f"{file}: replies.{index}") for index, reply in enumerate(script.replies)
    ]
    return tuple(script.models), replies


def _exhausted(script: str, count: int) -> Callable[[dict[str, Any]], Reply]:
    def respond(body: dict[str, Any]) -> Reply:
        return Reply.error(
            400, message=f"the fake model's script {script} has no reply left (all {count} used)"
        )

    return respond


def fake_model(script: str | None) -> tuple[FakeModel, str]:
    """A stopped FakeModel serving ``script`` (None: the scripted support model), and a
    phrase saying what it serves.

    Raises:
        SpecError: the script file is malformed.
    """
    # It serves as long as `psych dev` runs: it keeps no request bodies.
    if script is None:
        model = FakeModel(models=SCRIPTED_MODELS, record=False)
        model.responder = scripted_support_model
        return model, f"the scripted support model (answers {', '.join(SCRIPTED_MODELS)})"
    models, replies = load_script(script)
    model = FakeModel(models=models, record=False)
    model.enqueue(*replies)
    model.responder = _exhausted(script, len(replies))
    return model, f"the fake model scripted by {script} ({len(replies)} replies; answers " + (
        ", ".join(models) + ")"
    )
