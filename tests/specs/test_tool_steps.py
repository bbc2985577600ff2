"""A workflow's tool step gives an HTTP tool every argument its URL is filled with, or
publishing refuses it naming the step (``specs/_tool_steps.py``). From an audit of
WorkflowRun: the Run failed at the step ("missing argument 'order_id' (used in its
URL)"), after the steps before it had done their work."""

from __future__ import annotations

from typing import Any

from psych_runtime.specs import HttpTool, ToolStep, WorkflowSpec, validate


def refunding(arguments: dict[str, Any]) -> WorkflowSpec:
    refund = HttpTool(
        name="refund",
        description="Refund an order.",
        url="http://127.0.0.1:9/shops/{shop}/orders/{order_id}/refund?again={shop}",
        input_schema={"properties": {"shop": {"type": "string"}, "order_id": {}}},
    )
    return WorkflowSpec(
        name="w",
        tools=[refund],
        steps=[ToolStep(name="refund", tool="refund", arguments=arguments)],
    )


def test_a_step_giving_every_url_argument_is_valid() -> None:
    assert validate(refunding({"shop": "s1", "order_id": 7, "note": "late"})) == []


def test_a_step_missing_a_url_argument_is_refused_naming_it_once() -> None:
    problems = validate(refunding({"order_id": None}))
    assert [(p.path, p.message) for p in problems] == [
        (
            "steps[refund].arguments",
            "no 'shop': HTTP tool 'refund' fills {shop} of its URL with it",
        ),
        (
            "steps[refund].arguments",
            "no 'order_id': HTTP tool 'refund' fills {order_id} of its URL with it",
        ),
    ]
