"""Code tools for the example agents: the ToolRegistry a worker loads (PSYCH_TOOLS)."""

from __future__ import annotations

from psych_runtime.specs import ToolRegistry

registry = ToolRegistry()


@registry.register(idempotent=True)
def lookup_order(order_id: str) -> dict[str, str]:
    """Look up an order by id.

    Args:
        order_id: The order's id, e.g. "42".
    """
    return {"order_id": order_id, "status": "delivered", "total": "19.90 EUR"}


@registry.register
def create_account(plan: str) -> dict[str, str]:
    """Create a customer account on a plan.

    Args:
        plan: The plan's name, e.g. "starter".
    """
    return {"account": f"acct-{plan}", "plan": plan}


@registry.register(destructive=True)
def close_account(account_id: str) -> dict[str, str]:
    """Close a customer's account for good (examples/approval.py asks a person first).

    Args:
        account_id: The account's id, e.g. "acct-7".
    """
    return {"account": account_id, "status": "closed"}
