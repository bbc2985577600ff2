"""A credential an upstream echoes back in JSON as PHP and Go write it (``\\/`` for ``/``;
``\\u0026``, ``\\u003c``, ``\\u003e`` for ``&``, ``<``, ``>``) reaches neither what the
model reads nor the Run's history, records or report, on a real dev server with a real
worker."""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from psych_runtime.activities.secrets import StaticSecretResolver
from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus
from tests._upstream import Answer, Request, Upstream

from ._http_server import refund_tool
from .conftest import Harness

pytestmark = pytest.mark.e2e

SECRET = "wJalrXUtnFEMI/K7MDENG+bPx&RfiCY<EXAMPLE>KEY"


def payload_texts(value: Any) -> Iterator[str]:
    """Every payload of a history JSON document, decoded (payload data is base64)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "data" and isinstance(item, str):
                yield base64.b64decode(item).decode("utf-8", errors="replace")
            else:
                yield from payload_texts(item)
    elif isinstance(value, list):
        for item in value:
            yield from payload_texts(item)


def php_json(text: str) -> str:
    """``json_encode`` of PHP with its default flags: ``/`` written ``\\/``."""
    return json.dumps(text).replace("/", "\\/")


def go_json(text: str) -> str:
    """Go's ``encoding/json``: ``&``, ``<`` and ``>`` written as ``\\u`` escapes."""
    encoded = json.dumps(text)
    for char in "&<>":
        encoded = encoded.replace(char, f"\\u{ord(char):04x}")
    return encoded


def echo_json(encode: Callable[[str], str]) -> Callable[[Request], Answer]:
    """Answer 401 with a JSON document quoting the request's Authorization header."""

    def respond(request: Request) -> Answer:
        quoted = encode(request.headers.get("authorization", ""))
        return Answer(401, '{"error": "bad credentials", "authorization": ' + quoted + "}")

    return respond


@pytest.mark.parametrize("encode", [php_json, go_json], ids=["php", "go"])
async def test_a_credential_echoed_in_json_escapes_is_redacted(
    encode: Callable[[str], str], harness: Harness
) -> None:
    echoed = encode(SECRET)[1:-1]
    assert SECRET not in echoed  # the upstream really writes it another way
    harness.settings = dataclasses.replace(
        harness.settings, secrets=StaticSecretResolver({"orders-key": SECRET})
    )
    with Upstream(echo_json(encode)) as orders:
        spec = (
            AgentBuilder("echoed", registry=harness.registry)
            .model("fake-model")
            .http_tool(
                "refund",
                **refund_tool(orders.url),
                input_schema={
                    "type": "object",
                    "properties": {"order_id": {"type": "string"}},
                    "required": ["order_id"],
                },
                credential="orders-key",
            )
            .build()
        )
        harness.fake.enqueue(
            Reply.tool_calls(ToolCall("refund", {"order_id": "42"})), Reply.text("done")
        )
        async with harness.worker():
            run = await harness.client.dispatch(spec, "Refund order 42", scope=harness.scope)
            result = await harness.client.result(run, scope=harness.scope)
            report = await harness.client.report(run, scope=harness.scope)
            records = (await harness.client.records(run, scope=harness.scope)).records
            handle = harness.env.client.get_workflow_handle(run.workflow_id)
            history = json.loads((await handle.fetch_history()).to_json())
    assert result.status is RunStatus.COMPLETED, result.reason
    assert orders.requests[0].headers["authorization"] == f"Bearer {SECRET}"
    (call,) = report.tool_calls
    assert "Bearer [REDACTED:orders-key]" in (call.result or "")
    places = {
        "model request": json.dumps(harness.fake.requests[1]["messages"]),
        "report": report.model_dump_json(),
        "records": "\n".join(record.model_dump_json() for record in records),
        "history": "\n".join(payload_texts(history)),
    }
    for where, text in places.items():
        assert echoed not in text, f"the echoed credential is in the {where}"
        assert "bPx" not in text, f"a piece of the credential is in the {where}"
