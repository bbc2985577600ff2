"""An artifact of an A2A peer's answer over its share of ``large_result_bytes`` is stored
as its own blob and shown as a handle: ``read_tool_output`` reads it as the Run's own,
whether the call had the answer within its hold or the Run's poller read it. Until 12-08
the handle was on no record of the Run's, so every read was refused as another Run's (the
patch ``psych-a2a-artifact-handles`` puts it on the call's record)."""

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


# 3,000 characters: the artifact over the 1,000-byte bound, the answer around it within it.
@pytest.mark.parametrize("message", ["slowbig:2:3000", "big:3000"], ids=["polled", "held"])
async def test_a_large_artifact_is_a_handle_read_tool_output_reads(
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
            AgentBuilder("artifact_reader")
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
    # The answer itself shown whole, the artifact in it as a handle and a preview.
    assert 'Artifact "blob" is 3000 bytes, stored under handle' in shown[0], shown[0][:400]
    handle = HANDLE.search(shown[0])
    assert handle is not None
    finished = {r.call_id: r for r in records if isinstance(r, ToolCallFinished)}
    assert finished["r1"].status == "ok", shown[1][:300]
    assert "x" * 3000 in shown[1], shown[1][:300]
    (called,) = [r for r in records if isinstance(r, ToolCallFinished) and r.call_id != "r1"]
    assert not called.truncated
    assert called.handles == (handle.group(1),)
