"""A hook effect's detail (a command hook's stderr, the failure an on_error hook replaced)
reaches the records bounded, on a real dev server with psych's own worker and the fake
model: unbounded, a large one failed the call ("Complete result exceeds size limit")."""

from __future__ import annotations

import dataclasses
import sys

import pytest

from psych_runtime.activities import CommandHook, Hooks
from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus
from tests._upstream import Answer, Upstream

from .conftest import Harness

pytestmark = pytest.mark.e2e

CALLED: list[str] = []


def lookup(id: str) -> str:
    """Look a record up.

    Args:
        id: The record's id.
    """
    CALLED.append(id)
    return f"record {id}"


async def test_a_pre_hook_failing_with_a_flood_on_stderr_denies(harness: Harness) -> None:
    flood = "import sys; sys.stderr.write('no: ' + 'x' * 3_000_000 + ' END'); sys.exit(3)"
    CALLED.clear()
    harness.registry.register(lookup)
    hook = CommandHook.of([sys.executable, "-c", flood])
    harness.settings = dataclasses.replace(harness.settings, hooks=Hooks().pre("lookup", hook))
    harness.fake.enqueue(Reply.tool_calls(ToolCall("lookup", {"id": "7"})), Reply.text("done"))
    spec = AgentBuilder("flooded", registry=harness.registry).model("fake-model").tool("lookup")
    async with harness.worker():
        run = await harness.client.dispatch(spec.build(), "look", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    assert CALLED == []
    (call,) = report.tool_calls
    assert call.status == "denied", call.result
    (effect,) = call.hooks
    assert effect.effect == "denied" and effect.detail.startswith("no: xxx")
    assert len(effect.detail) < 10_000 and effect.detail.endswith("xx END")


async def test_an_on_error_hook_replacing_a_huge_error_page(harness: Harness) -> None:
    """The failure an on_error hook replaced is kept in its record, bounded: a 3 MB error
    page failed the call ("Complete result exceeds size limit") after the hook ran."""
    page = "upstream exploded: " + "y" * 3_000_000 + " END"
    harness.settings = dataclasses.replace(
        harness.settings,
        hooks=Hooks().on_error("fetch", lambda call, error: "cached answer"),
    )
    with Upstream(lambda request: Answer(500, page, "text/plain")) as api:
        spec = (
            AgentBuilder("paged")
            .model("fake-model")
            .http_tool("fetch", description="Fetch it.", url=api.url + "/it", method="GET")
            .build()
        )
        harness.fake.enqueue(Reply.tool_calls(ToolCall("fetch", {})), Reply.text("done"))
        async with harness.worker():
            run = await harness.client.dispatch(spec, "fetch", scope=harness.scope)
            result = await harness.client.result(run, scope=harness.scope)
            report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    (call,) = report.tool_calls
    assert (call.status, call.result) == ("ok", "cached answer")
    (effect,) = call.hooks
    assert effect.effect == "replaced_error"
    assert effect.detail.startswith("HTTP 500 Internal Server Error: upstream exploded: yyy")
    assert effect.detail.endswith("yy END") and len(effect.detail) < 10_000
    assert "characters cut" in effect.detail
