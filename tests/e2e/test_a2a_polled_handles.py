"""An A2A peer's answer the Run's poller reads (its task still working when the call's
hold ended) is stored as any tool result past ``large_result_bytes``: the model is shown a
handle and a preview, and ``read_tool_output`` reads that handle on, as the Run's own, as
it reads an answer the call itself had within its hold. Until 12-08 the poller's answer
was shown with its handle, but the call's record held neither the handle nor
``truncated``, so the read was refused as another Run's (the patch
``psych-a2a-polled-answer-as-read`` took the read's outcome as the call's result)."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from typing import Any

import pytest

from psych_runtime.activities.a2a import A2aSettings
from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus, ToolCallFinished
from tests.a2a.peer import serve_peer

from .conftest import Harness

pytestmark = pytest.mark.e2e

HANDLE = re.compile(r'handle "(sha256:[0-9a-f]{64})"')


# 950 characters: the artifact shown whole (within the bound), the whole answer over it.
@pytest.mark.parametrize("message", ["slowbig:2:950", "big:950"], ids=["polled", "held"])
async def test_a_polled_answer_over_large_result_bytes_is_a_handle_the_model_reads(
    harness: Harness, message: str
) -> None:
    harness.settings = dataclasses.replace(harness.settings, a2a=A2aSettings(hold_seconds=0.5))
    shown: list[str] = []

    def respond(body: dict[str, Any]) -> Reply:
        tool = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if not tool:
            return Reply.tool_calls(ToolCall("travel__book", {"message": message}))
        shown.append(tool[-1])
        handle = HANDLE.search(tool[0])
        if len(tool) == 1 and handle is not None:
            arguments = {"handle": handle.group(1), "offset": 0, "length": 65536}
            return Reply.tool_calls(ToolCall("read_tool_output", arguments, id="r1"))
        return Reply.text("done")

    harness.fake.responder = respond
    async with serve_peer(("book",)) as peer:
        spec = (
            AgentBuilder("polled_booker")
            .model("fake-model")
            .a2a_peer("travel", peer.url)
            .limits(large_result_bytes=1000)
            .build()
        )
        async with harness.worker():
            run = await harness.client.dispatch(spec, "Book it", scope=harness.scope)
            result = await asyncio.wait_for(harness.client.result(run, scope=harness.scope), 90)
            records = (await harness.client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.COMPLETED, result.reason
    assert len(shown) == 2, shown
    assert "too large to show whole" in shown[0] and len(shown[0]) < 2000, shown[0][:300]
    finished = {r.call_id: r for r in records if isinstance(r, ToolCallFinished)}
    assert finished["r1"].status == "ok", shown[1][:300]
    assert 'Artifact "blob":' in shown[1] and "x" * 950 in shown[1], shown[1][:300]
    (called,) = [r for r in records if isinstance(r, ToolCallFinished) and r.call_id != "r1"]
    assert called.truncated and called.result_ref is not None
