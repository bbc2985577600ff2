"""The model-request activity of ``ModelLoop``: the HTTP work of one model call, nothing else.

It sends, for turn k of an N-turn loop, the very request body AgentRun's model activity
sent the fake model at turn k of an N-turn AgentRun (``AgentBench.request_bodies`` records
them from the fake model: same messages, tools, ``stream_options``), with the same
``Authorization`` header, reads the streamed answer line by line, and returns the first
line. No conversation store, no records, no payload beyond the turn number: the floor of a
turn that calls a model.
"""

from __future__ import annotations

from typing import Any

import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError

from bench._workflows import MODEL_REQUEST_ACTIVITY, RequestTurn
from psych_runtime.activities import Endpoint


class ModelRequester:
    """Holds the fake model's URL, one HTTP client and the bodies to send."""

    def __init__(self, endpoint: Endpoint, http: httpx.AsyncClient) -> None:
        self.url = endpoint.base_url.rstrip("/") + "/chat/completions"
        self.headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
        self.http = http
        self._bodies: dict[int, list[dict[str, Any]]] = {}

    def learn(self, turns: int, bodies: list[dict[str, Any]]) -> None:
        """Send ``bodies`` (turn 1 first) in ``turns``-turn loops."""
        if len(bodies) != turns:
            raise ValueError(f"{len(bodies)} request bodies for a {turns}-turn loop")
        self._bodies[turns] = bodies

    @activity.defn(name=MODEL_REQUEST_ACTIVITY)
    async def request(self, turn: RequestTurn) -> str:
        """Stream one chat completion; return its first line."""
        bodies = self._bodies.get(turn.turns)
        if bodies is None:
            raise ApplicationError(
                f"no request bodies learned for {turn.turns}-turn loops "
                "(ModelRequester.learn first)",
                non_retryable=True,
            )
        first = ""
        async with self.http.stream(
            "POST", self.url, json=bodies[turn.turn - 1], headers=self.headers
        ) as response:
            response.raise_for_status()
            async for line in response.aiter_lines():
                first = first or line
        return first[:80]
