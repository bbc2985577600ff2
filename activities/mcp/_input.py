"""An MCP server asking for input (2026-07-28: an ``input_required`` result of
``tools/call``): what a person is asked, how their answers become ``inputResponses``, and
a ``tools/call`` round (``_call.py``'s ``call_round``, which sends them) awaited under
heartbeats (``heartbeating_round``).

The worker never waits for a person inside an activity: a round that ends in
``input_required`` is returned to the workflow as data (``McpInputRequired``), which
suspends the Run on a question and schedules the next round with the answers
(``McpInputAnswers``). ``roots/list`` requests are answered here (no roots: a worker has no
workspace to offer); sampling requests are refused (this runtime lends no model to MCP
servers), so a call asking for one fails with a message saying so.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import mcp_types
from pydantic import TypeAdapter
from temporalio import activity

from psych_runtime.activities.contract import McpInputAnswers, McpInputRequired, McpQuestion

_R = TypeVar("_R")
_REQUEST = TypeAdapter[mcp_types.InputRequest](mcp_types.InputRequest)
_REFUSALS = ("decline", "cancel")


class Unanswerable(Exception):
    """The server asked for input this runtime cannot give (the message says which)."""


class BadAnswer(Exception):
    """A person's answer does not fit what the server asked (the message says how)."""


def input_required(result: mcp_types.InputRequiredResult) -> McpInputRequired:
    """What the server asks, as the workflow carries it and a person reads it.

    Raises:
        Unanswerable: the server asks to sample a model.
    """
    requests: dict[str, dict[str, Any]] = {}
    questions: list[McpQuestion] = []
    for key, request in (result.input_requests or {}).items():
        requests[key] = request.model_dump(mode="json", by_alias=True, exclude_none=True)
        if isinstance(request, mcp_types.CreateMessageRequest):
            raise Unanswerable(
                "the server asks to sample a model (sampling/createMessage), which this "
                "runtime does not offer MCP servers"
            )
        if isinstance(request, mcp_types.ElicitRequest):
            questions.append(McpQuestion(key=key, text=_question(request.params)))
    return McpInputRequired(
        requests=requests, request_state=result.request_state, questions=tuple(questions)
    )


def _question(params: mcp_types.ElicitRequestParams) -> str:
    if isinstance(params, mcp_types.ElicitRequestURLParams):
        return f"{params.message}\n\nOpen {params.url}, then answer done (or decline, or cancel)."
    fields = _fields(params.requested_schema)
    if len(fields) == 1:
        how = f"Answer with the {fields[0]}"
    else:
        how = "Answer with a JSON object of these fields:\n" + "\n".join(
            f"- {field}" for field in fields
        )
    return f"{params.message}\n\n{how} (or decline, or cancel)."


def _fields(schema: dict[str, Any]) -> list[str]:
    required = set(schema.get("required", ()))
    lines = []
    for name, spec in dict(schema.get("properties", {})).items():
        kind = spec.get("type", "value")
        if "enum" in spec:
            kind = "one of " + ", ".join(str(option) for option in spec["enum"])
        about = spec.get("description") or spec.get("title")
        lines.append(
            f"{name} ({kind}{', required' if name in required else ''})"
            + (f": {about}" if about else "")
        )
    return lines


def responses(answers: McpInputAnswers) -> mcp_types.InputResponses:
    """The ``inputResponses`` of a retried call: each request answered.

    Raises:
        BadAnswer: an answer does not fit its form, or a request was left unanswered.
    """
    out: mcp_types.InputResponses = {}
    for key, raw in answers.requests.items():
        request = _REQUEST.validate_python(raw)
        if isinstance(request, mcp_types.ListRootsRequest):
            out[key] = mcp_types.ListRootsResult(roots=[])
            continue
        if not isinstance(request, mcp_types.ElicitRequest):
            raise BadAnswer(f"request {key!r} ({request.method}) cannot be answered")
        text = answers.answers.get(key)
        if text is None:
            raise BadAnswer(f"request {key!r} has no answer")
        out[key] = _elicit_result(key, request.params, text)
    return out


def _elicit_result(
    key: str, params: mcp_types.ElicitRequestParams, text: str
) -> mcp_types.ElicitResult:
    word = text.strip().lower()
    if word in _REFUSALS:
        return mcp_types.ElicitResult(action="decline" if word == "decline" else "cancel")
    if isinstance(params, mcp_types.ElicitRequestURLParams):
        return mcp_types.ElicitResult(action="accept")
    schema = params.requested_schema
    properties: dict[str, Any] = dict(schema.get("properties", {}))
    try:
        given = json.loads(text)
    except ValueError:
        given = None
    if isinstance(given, dict):
        content = {
            name: _value(key, name, properties.get(name), value) for name, value in given.items()
        }
    elif len(properties) == 1:
        ((name, spec),) = properties.items()
        content = {name: _value(key, name, spec, text.strip())}
    else:
        raise BadAnswer(
            f"the answer to {key!r} must be a JSON object of the fields "
            f"{', '.join(properties)} (or decline, or cancel)"
        )
    missing = [name for name in schema.get("required", ()) if content.get(name) is None]
    if missing:
        raise BadAnswer(f"the answer to {key!r} lacks {', '.join(missing)}")
    return mcp_types.ElicitResult(action="accept", content=content)


def _value(key: str, name: str, spec: dict[str, Any] | None, value: Any) -> Any:
    """``value`` as the form's field ``name`` wants it (a text answer is converted)."""
    if spec is None:
        raise BadAnswer(f"the form of {key!r} has no field {name!r}")
    kind = spec.get("type")
    try:
        if kind == "integer" and not isinstance(value, bool):
            converted: Any = int(value)
        elif kind == "number" and not isinstance(value, bool):
            converted = float(value)
        elif kind == "boolean":
            converted = _boolean(value)
        elif kind == "array":
            items = value.split(",") if isinstance(value, str) else value
            converted = [str(item).strip() for item in items]
        else:
            converted = str(value)
    except (TypeError, ValueError):
        raise BadAnswer(f"{name!r} of {key!r} must be {kind}, not {value!r}") from None
    options = spec.get("enum")
    if options is not None and converted not in options:
        raise BadAnswer(f"{name!r} of {key!r} must be one of {options}, not {value!r}")
    return converted


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower()
    if word in ("true", "yes", "y"):
        return True
    if word in ("false", "no", "n"):
        return False
    raise ValueError(word)


async def heartbeating_round(
    work: Coroutine[Any, Any, _R],
    progress: asyncio.Queue[str],
    *,
    within: float,
    beat_every: float,
) -> _R:
    """Await ``work`` (a ``call_round``) within ``within`` seconds, heartbeating every
    ``beat_every`` seconds and on each progress notification. Cancellation (and the
    timeout, ``TimeoutError``) cancel it and wait for it, so the SDK has queued its
    cancellation notice before this returns (the pool sends it before closing the
    session: ``McpSessions._own``)."""
    task = asyncio.create_task(work)
    waiter: asyncio.Task[str] | None = None
    deadline = time.monotonic() + within
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            if waiter is None:
                waiter = asyncio.create_task(progress.get())
            done, _ = await asyncio.wait(
                {task, waiter},
                timeout=min(beat_every, left),
                return_when=asyncio.FIRST_COMPLETED,
            )
            if task in done:
                return task.result()
            if waiter in done:
                activity.heartbeat(waiter.result())
                waiter = None
            else:
                activity.heartbeat()
    except BaseException:
        task.cancel()
        await asyncio.wait({task})
        if not task.cancelled():
            task.exception()  # retrieved, so asyncio does not log it as never retrieved
        raise
    finally:
        if waiter is not None:
            waiter.cancel()
