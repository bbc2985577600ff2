"""The model-request activity of ``ModelLoop``: the HTTP work of one model call, nothing else.

It sends what AgentRun's model activity sends for the same turn of the benchmark's agent
(the system prompt, the user message, every earlier turn's tool call and result, the one
tool's definition; ``stream: true``) to the same fake model, reads the streamed answer
line by line, and returns the first line. No conversation store, no records, no payload
beyond the turn number: the floor of a turn that calls a model.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
from temporalio import activity

from bench._workflows import MODEL_REQUEST_ACTIVITY, RequestTurn

_TOOL = {
    "type": "function",
    "function": {
        "name": "small_result",
        "description": "Return a short result for this turn.",
        "parameters": {
            "type": "object",
            "properties": {"turn": {"type": "integer", "description": "The turn number."}},
            "required": ["turn"],
        },
    },
}


def request_body(model: str, turn: RequestTurn) -> dict[str, Any]:
    """The chat-completions body of ``turn``, as the benchmark's agent would send it."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Call the tool until told otherwise."},
        {"role": "user", "content": f"Work. turns={turn.turns}"},
    ]
    for earlier in range(1, turn.turn):
        call = {
            "id": f"call_{earlier}",
            "type": "function",
            "function": {"name": "small_result", "arguments": json.dumps({"turn": earlier})},
        }
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        result = {"role": "tool", "tool_call_id": f"call_{earlier}", "content": f"ok {earlier}"}
        messages.append(result)
    return {"model": model, "messages": messages, "tools": [_TOOL], "stream": True}


class ModelRequester:
    """Holds the fake model's URL and one HTTP client for the activity."""

    def __init__(self, base_url: str, model: str, http: httpx.AsyncClient) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.http = http

    @activity.defn(name=MODEL_REQUEST_ACTIVITY)
    async def request(self, turn: RequestTurn) -> str:
        """Stream one chat completion; return its first line."""
        body = request_body(self.model, turn)
        first = ""
        async with self.http.stream("POST", self.url, json=body) as response:
            response.raise_for_status()
            async for line in response.aiter_lines():
                first = first or line
        return first[:80]
