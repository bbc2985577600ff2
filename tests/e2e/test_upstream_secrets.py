"""Secrets an upstream echoes back never reach a Run's history, records, report or blobs;
an expected model failure is one log line, on a real dev server with a real worker.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from psych_runtime.activities.model import Endpoint, ModelEndpoints
from psych_runtime.activities.secrets import StaticSecretResolver
from psych_runtime.specs import AgentBuilder, RunFailed
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers._worker import run_worker
from psych_runtime.workflows import RunStatus
from tests._upstream import Upstream, echo_headers

from ._http_server import refund_tool
from .conftest import Harness

pytestmark = pytest.mark.e2e

TOOL_SECRET = "orders-tok-7f3a9c1e5b"
MODEL_KEY = "sk-model-key-4d2e8b6a0c"


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


def forms(secret: str) -> list[str]:
    return [secret, base64.b64encode(secret.encode()).decode()]


async def test_echoed_credentials_reach_no_history_record_report_or_blob(
    harness: Harness, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    settings = dataclasses.replace(
        harness.settings,
        endpoints=ModelEndpoints(default=Endpoint(harness.fake.base_url, MODEL_KEY)),
        secrets=StaticSecretResolver({"orders-key": TOOL_SECRET}),
    )
    with Upstream(echo_headers(500)) as orders:
        spec = (
            AgentBuilder("leaky", registry=harness.registry)
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
            Reply.tool_calls(ToolCall("refund", {"order_id": "42"})),
            Reply.error(401, message=f"Incorrect API key provided: {MODEL_KEY}"),
        )
        async with run_worker(harness.env.client, settings):
            run = await harness.client.dispatch(spec, "Refund order 42", scope=harness.scope)
            with pytest.raises(RunFailed, match="model_error"):
                await harness.client.result(run, scope=harness.scope)
            report = await harness.client.report(run, scope=harness.scope)
            records = (await harness.client.records(run, scope=harness.scope)).records
            handle = harness.env.client.get_workflow_handle(run.workflow_id)
            history = json.loads((await handle.fetch_history()).to_json())

    # The echo really happened: the server saw the token and the model saw the redacted page.
    assert orders.requests[0].headers["authorization"] == f"Bearer {TOOL_SECRET}"
    assert report.status is RunStatus.FAILED
    assert "Bearer [REDACTED:orders-key]" in (report.tool_calls[0].result or "")
    assert "Incorrect API key provided: [REDACTED:model-api-key]" in json.dumps(
        report.model_dump(mode="json")
    )
    shown_to_model = json.dumps(harness.fake.requests[1]["messages"])
    assert "[REDACTED:orders-key]" in shown_to_model

    history_text = json.dumps(history) + "\n".join(payload_texts(history))
    places = {
        "history": history_text,
        "report": report.model_dump_json(),
        "records": "\n".join(record.model_dump_json() for record in records),
        "blobs": "\n".join(
            path.read_bytes().decode("utf-8", errors="replace")
            for path in (harness.home / "blobs").rglob("*")
            if path.is_file()
        ),
        "model requests": json.dumps(harness.fake.requests),
        "log": "\n".join(
            record.getMessage()
            + (logging.Formatter().formatException(record.exc_info) if record.exc_info else "")
            for record in caplog.records
        ),
    }
    for where, text in places.items():
        for secret in (*forms(TOOL_SECRET), *forms(MODEL_KEY)):
            assert secret not in text, f"{secret} found in {where}"
    assert "[REDACTED:model-api-key]" in places["history"]


async def test_an_expected_model_failure_logs_one_line_and_no_traceback(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    spec = AgentBuilder("blip").model("fake-model").build()
    harness.fake.enqueue(Reply.error(500, message="upstream hiccup"), Reply.text("fine now"))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "hi", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)

    assert result.answer == "fine now"
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage().split(" ({")[0] for r in loud] == [
        "model call failed (transient): model fake-model: HTTP 500 Internal Server Error: "
        "upstream hiccup"
    ]
    assert all(r.exc_info is None for r in loud)
