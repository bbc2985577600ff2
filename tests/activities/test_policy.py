"""The Policy port: fixed decisions in the catalog, per-call decisions, failures = deny."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from psych_runtime.activities.blobs import LocalBlobStore
from psych_runtime.activities.contract import (
    CatalogInput,
    CodeToolCall,
    PolicyDecision,
    PolicyInput,
    ToolInfo,
)
from psych_runtime.activities.tools import RulePolicy, ToolActivities
from psych_runtime.specs import ExternalWait, HttpTool, Scope, ToolRegistry

SCOPE = Scope(tenant="acme")


def make_registry() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.register(read_only=True)
    def read_orders() -> str:
        """Read orders."""
        return "[]"

    @registry.register(destructive=True)
    def drop_orders() -> str:
        """Drop every order."""
        return "dropped"

    @registry.register
    def update_order(order_id: str) -> str:
        """Update an order."""
        return order_id

    @registry.register
    def wait_for_payment(order_id: str) -> ExternalWait:
        """Wait until the payment provider calls back."""
        return ExternalWait(token=f"pay-{order_id}", message="waiting for the payment webhook")

    return registry


def catalog_input() -> CatalogInput:
    return CatalogInput(
        run_id="r1",
        code_tools=("drop_orders", "read_orders", "update_order"),
        http_tools=(
            HttpTool(name="ping", description="Ping.", url="http://127.0.0.1:1/"),
            HttpTool(name="fetch", description="Fetch.", url="http://127.0.0.1:1/", method="GET"),
            HttpTool(
                name="purge", description="Purge.", url="http://127.0.0.1:1/", method="DELETE"
            ),
        ),
    )


async def test_rule_policy_decides_per_tool_by_annotation_and_name(tmp_path: Path) -> None:
    policy = RulePolicy(tools={"update_*": "deny"}, destructive="ask")
    tools = ToolActivities(registry=make_registry(), blobs=LocalBlobStore(tmp_path), policy=policy)
    catalog = await ActivityEnvironment().run(tools.catalog, catalog_input())
    decisions = {e.name: e.policy.decision if e.policy else None for e in catalog.entries}
    assert decisions == {
        "drop_orders": "ask",  # destructive
        "fetch": "allow",  # HTTP GET: read-only
        "purge": "ask",  # HTTP DELETE: destructive
        "ping": "allow",  # HTTP POST: write, allowed by default
        "read_orders": "allow",
        "update_order": "deny",  # the name rule wins
    }


async def test_default_policy_allows_everything(tmp_path: Path) -> None:
    tools = ToolActivities(registry=make_registry(), blobs=LocalBlobStore(tmp_path))
    catalog = await ActivityEnvironment().run(tools.catalog, catalog_input())
    assert {e.policy.decision for e in catalog.entries if e.policy} == {"allow"}


class Exploding:
    def fixed(self, tool: ToolInfo) -> PolicyDecision | None:
        if tool.name == "read_orders":
            return None  # decided per call
        raise RuntimeError("policy store down")

    async def decide(
        self, scope: Scope, tool: ToolInfo, arguments: Mapping[str, Any]
    ) -> PolicyDecision:
        raise RuntimeError("policy store down")


async def test_an_exception_inside_the_policy_counts_as_deny(tmp_path: Path) -> None:
    tools = ToolActivities(
        registry=make_registry(), blobs=LocalBlobStore(tmp_path), policy=Exploding()
    )
    env = ActivityEnvironment()
    catalog = await env.run(tools.catalog, catalog_input())
    entries = {e.name: e for e in catalog.entries}
    assert entries["read_orders"].policy is None
    denied = entries["drop_orders"].policy
    assert denied is not None
    assert denied.decision == "deny"
    assert "policy store down" in denied.reason
    decision = await env.run(
        tools.decide,
        PolicyInput(
            run_id="r1",
            call_id="c1",
            tool=entries["read_orders"].info,
            arguments={},
            scope=SCOPE,
        ),
    )
    assert decision.decision == "deny"


class Hanging(Exploding):
    async def decide(
        self, scope: Scope, tool: ToolInfo, arguments: Mapping[str, Any]
    ) -> PolicyDecision:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")


async def test_a_policy_that_does_not_answer_counts_as_deny(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before, the activity ran into its start-to-close timeout, was retried, and the Run
    # failed: a hang was not a deny as an exception is.
    monkeypatch.setattr("psych_runtime.activities.tools._policy.POLICY_ANSWER_SECONDS", 0.2)
    tools = ToolActivities(
        registry=make_registry(), blobs=LocalBlobStore(tmp_path), policy=Hanging()
    )
    info = ToolInfo(name="read_orders", kind="code")
    started = time.monotonic()
    decision = await ActivityEnvironment().run(
        tools.decide,
        PolicyInput(run_id="r1", call_id="c1", tool=info, arguments={}, scope=SCOPE),
    )
    assert time.monotonic() - started < 5
    assert decision == PolicyDecision(
        decision="deny", reason="the policy did not answer within 0.2 s"
    )


@pytest.mark.parametrize("order_id", ["42"])
async def test_a_tool_returning_external_wait_suspends_on_its_token(
    tmp_path: Path, order_id: str
) -> None:
    tools = ToolActivities(registry=make_registry(), blobs=LocalBlobStore(tmp_path))
    outcome = await ActivityEnvironment().run(
        tools.code,
        CodeToolCall(
            run_id="r1",
            call_id="c1",
            tool="wait_for_payment",
            arguments={"order_id": order_id},
            large_result_bytes=10_000,
            scope=SCOPE,
        ),
    )
    assert outcome.status == "wait"
    assert outcome.wait_token == "pay-42"
    assert outcome.content == "waiting for the payment webhook"
