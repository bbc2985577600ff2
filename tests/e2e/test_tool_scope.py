"""A code tool learns the Scope of the Run it runs for (``tool_scope``): its tenant,
principal and labels, in a sync tool's thread, an async tool and a local tool alike."""

from __future__ import annotations

import json

import pytest

from psych_runtime.specs import AgentBuilder, PsychError, Scope, tool_call_scope, tool_scope
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus

from .conftest import Harness

pytestmark = pytest.mark.e2e


def whose_sync() -> str:
    """Say whose call this is."""
    return tool_scope().model_dump_json()


async def whose_async() -> str:
    """Say whose call this is."""
    return tool_scope().model_dump_json()


def whose_local() -> str:
    """Say whose call this is."""
    return tool_scope().model_dump_json()


async def test_every_kind_of_code_tool_reads_its_runs_scope(harness: Harness) -> None:
    # Until 12-06 a code tool could not tell which tenant (or principal) it ran for: a
    # multi-tenant tool had no way to act on the right tenant's data.
    harness.registry.register(whose_sync)
    harness.registry.register(whose_async)
    harness.registry.register(idempotent=True, local_seconds=2.0)(whose_local)
    spec = (
        AgentBuilder("whose", registry=harness.registry)
        .model("fake-model")
        .tool(whose_sync)
        .tool(whose_async)
        .tool(whose_local)
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("whose_sync"), ToolCall("whose_async"), ToolCall("whose_local")),
        Reply.text("done"),
    )
    scope = Scope(tenant="acme", principal="ada", labels={"team": "billing"})
    async with harness.worker():
        run = await harness.client.dispatch(spec, "whose?", scope=scope)
        result = await harness.client.result(run, scope=scope)
        report = await harness.client.report(run, scope=scope)
    assert result.status is RunStatus.COMPLETED
    assert {call.tool: call.status for call in report.tool_calls} == dict.fromkeys(
        ("whose_async", "whose_local", "whose_sync"), "ok"
    )
    for call in report.tool_calls:
        assert Scope.model_validate(json.loads(call.result or "")) == scope, call.tool


def test_a_tool_called_outside_a_run_is_told_so_and_a_test_can_give_it_a_scope() -> None:
    with pytest.raises(PsychError, match="only inside a code tool's call"):
        whose_sync()
    scope = Scope(tenant="acme", principal="test")
    with tool_call_scope(scope):
        assert Scope.model_validate_json(whose_sync()) == scope
    with pytest.raises(PsychError):
        tool_scope()  # the block ended: no Scope again
