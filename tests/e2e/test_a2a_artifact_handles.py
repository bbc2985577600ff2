"""An artifact of an A2A peer's answer over its share of ``large_result_bytes`` is stored
as its own blob and shown as a handle: ``read_tool_output`` reads it as the Run's own,
whether the call had the answer within its hold, a peer's push ended the Run's wait on its
task, or the Run's poller read it. Until 12-08 the handle was on no record of the Run's,
so every read was refused as another Run's (the patch ``psych-a2a-artifact-handles`` puts
it on the call's record).

So is a whole answer over the bound that the Run's poller read (its task still working when
the call's hold ended): until 12-08 it was shown with its handle, but the call's record held
neither the handle nor ``truncated`` (the patch ``psych-a2a-polled-answer-as-read`` took
the read's outcome as the call's result)."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from typing import Any

import pytest

from psych_runtime.activities.a2a import A2aSettings
from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import Record, Resumed, RunStatus, ToolCallFinished
from tests.a2a.peer import serve_peer
from tests.a2a.served import serve_app

from .conftest import Harness

pytestmark = pytest.mark.e2e

HANDLE = re.compile(r'handle "(sha256:[0-9a-f]{64})"')


async def _read_back(
    harness: Harness, message: str, push_url: str | None = None
) -> tuple[list[str], list[Record]]:
    """A Run whose model calls the peer with ``message`` and reads the first handle it is
    shown back with ``read_tool_output``: what the model was shown after each call, and the
    Run's records."""
    harness.settings = dataclasses.replace(
        harness.settings, a2a=A2aSettings(hold_seconds=0.5, push_url=push_url)
    )
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
    async with serve_peer(("book",), push=push_url is not None) as peer:
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
    return shown, list(records)


def _read_as_own(shown: list[str], records: list[Record]) -> None:
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


# 3,000 characters: the artifact over the 1,000-byte bound, the answer around it within it.
@pytest.mark.parametrize("message", ["slowbig:2:3000", "big:3000"], ids=["polled", "held"])
async def test_a_large_artifact_is_a_handle_read_tool_output_reads(
    harness: Harness, message: str
) -> None:
    shown, records = await _read_back(harness, message)
    _read_as_own(shown, records)


async def test_a_large_artifact_a_push_brought_is_a_handle_read_tool_output_reads(
    harness: Harness,
) -> None:
    # 3 s of work: the poller reads after 2 s and then 4 s more; the push comes first.
    async with serve_app(harness.client, tokens=harness.settings.tokens) as base:
        shown, records = await _read_back(harness, "slowbig:3:3000", f"{base}/a2a-push")
    [resumed] = [r for r in records if isinstance(r, Resumed)]
    assert resumed.by == harness.scope.principal  # the push ended the wait, not a poll
    _read_as_own(shown, records)


# 950 characters: the artifact shown whole (within the bound), the whole answer over it.
@pytest.mark.parametrize("message", ["slowbig:2:950", "big:950"], ids=["polled", "held"])
async def test_a_polled_answer_over_large_result_bytes_is_a_handle_the_model_reads(
    harness: Harness, message: str
) -> None:
    shown, records = await _read_back(harness, message)
    assert len(shown) == 2, shown
    assert "too large to show whole" in shown[0] and len(shown[0]) < 2000, shown[0][:300]
    finished = {r.call_id: r for r in records if isinstance(r, ToolCallFinished)}
    assert finished["r1"].status == "ok", shown[1][:300]
    assert 'Artifact "blob":' in shown[1] and "x" * 950 in shown[1], shown[1][:300]
    (called,) = [r for r in records if isinstance(r, ToolCallFinished) and r.call_id != "r1"]
    assert called.truncated and called.result_ref is not None
