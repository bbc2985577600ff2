"""The model-request activity of ``ModelLoop``: the HTTP work of one model call, nothing else.

It sends, for turn k of an N-turn loop, the very request body AgentRun's model activity
sent the fake model at turn k of an N-turn AgentRun (``AgentBench.request_bodies`` records
them from the fake model: same messages, tools, ``stream_options``), with the same
``Authorization`` header, reads the streamed answer line by line, and returns the first
line. No conversation store, no records, no payload beyond the turn number: the floor of a
turn that calls a model.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError

from bench._workflows import (
    MODEL_REQUEST_ACTIVITY,
    STORING_MODEL_ACTIVITY,
    STORING_TOOL_ACTIVITY,
    RequestTurn,
    StoredAnswer,
    StoredResult,
    StoringToolCall,
    StoringTurn,
)
from psych_runtime.activities import Endpoint, LocalBlobStore
from psych_runtime.activities.blobs import canonical_json


class ModelRequester:
    """Holds the fake model's URL, one HTTP client and the bodies to send."""

    def __init__(
        self, endpoint: Endpoint, http: httpx.AsyncClient, blobs: LocalBlobStore | None = None
    ) -> None:
        self.url = endpoint.base_url.rstrip("/") + "/chat/completions"
        self.headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
        self.http = http
        self.blobs = blobs
        """Where ``StoringLoop``'s activities keep its conversation."""
        self._bodies: dict[int, list[dict[str, Any]]] = {}

    def learn(self, turns: int, bodies: list[dict[str, Any]]) -> None:
        """Send ``bodies`` (turn 1 first) in ``turns``-turn loops."""
        if len(bodies) != turns:
            raise ValueError(f"{len(bodies)} request bodies for a {turns}-turn loop")
        self._bodies[turns] = bodies

    def _body(self, turn: int, turns: int) -> dict[str, Any]:
        bodies = self._bodies.get(turns)
        if bodies is None:
            raise ApplicationError(
                f"no request bodies learned for {turns}-turn loops (ModelRequester.learn first)",
                non_retryable=True,
            )
        return bodies[turn - 1]

    def _store(self) -> LocalBlobStore:
        if self.blobs is None:
            raise ApplicationError("this requester has no blob store", non_retryable=True)
        return self.blobs

    @activity.defn(name=MODEL_REQUEST_ACTIVITY)
    async def request(self, turn: RequestTurn) -> str:
        """Stream one chat completion; return its first line."""
        first = ""
        async with self.http.stream(
            "POST", self.url, json=self._body(turn.turn, turn.turns), headers=self.headers
        ) as response:
            response.raise_for_status()
            async for line in response.aiter_lines():
                first = first or line
        return first[:80]

    @activity.defn(name=STORING_MODEL_ACTIVITY)
    async def request_and_store(self, turn: StoringTurn) -> StoredAnswer:
        """Stream one chat completion, parse it into text and tool calls, store the
        assistant message and a conversation node after ``turn.head``; return the node's
        ref and the first tool call."""
        blobs = self._store()
        text: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        async with self.http.stream(
            "POST", self.url, json=self._body(turn.turn, turn.turns), headers=self.headers
        ) as response:
            response.raise_for_status()
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                for choice in json.loads(line[6:]).get("choices") or ():
                    delta = choice.get("delta") or {}
                    if delta.get("content"):
                        text.append(delta["content"])
                    for piece in delta.get("tool_calls") or ():
                        call = calls.setdefault(piece.get("index", 0), {"arguments": []})
                        call["id"] = call.get("id") or piece.get("id")
                        function = piece.get("function") or {}
                        call["name"] = call.get("name") or function.get("name")
                        call["arguments"].append(function.get("arguments") or "")
        tool_calls = [
            {"id": c["id"], "name": c["name"], "arguments": "".join(c["arguments"])}
            for _, c in sorted(calls.items())
        ]
        message = {"role": "assistant", "content": "".join(text), "tool_calls": tool_calls}
        message_ref = await blobs.put(canonical_json(message))
        node = {"parent": turn.head, "messages": [*turn.new, message_ref]}
        head = await blobs.put(canonical_json(node))
        first = tool_calls[0] if tool_calls else None
        return StoredAnswer(
            head=head,
            call_id=first and first["id"],
            tool=first and first["name"],
            arguments=first and first["arguments"],
        )

    @activity.defn(name=STORING_TOOL_ACTIVITY)
    async def tool_and_store(self, call: StoringToolCall) -> StoredResult:
        """Run the trivial tool and store the tool message holding its result."""
        content = f"ok {call.turn}"
        message = {"role": "tool", "content": content, "tool_call_id": call.call_id}
        message_ref = await self._store().put(canonical_json(message))
        return StoredResult(content=content, message_ref=message_ref)
