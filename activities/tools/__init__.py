"""psych_runtime.activities.tools: code and HTTP tools, and what every tool call shares.

``ToolActivities`` (catalogue, policy, code, HTTP, ``read_tool_output``, storing a child's
answer), the ``Policy``
port, storing an outcome (handle + preview for large results), and reporting the outcome of
a call not safe to repeat through the worker's client (surviving a server outage).
"""

from psych_runtime.activities.tools._activities import ToolActivities
from psych_runtime.activities.tools._outcomes import (
    fixed_decision,
    latency,
    store_outcome,
    unexpected,
)
from psych_runtime.activities.tools._policy import (
    Policy,
    RulePolicy,
    policy_description,
    policy_digest,
)
from psych_runtime.activities.tools._reporting import (
    OUTAGE_MARGIN,
    complete_through_client,
    drain_reports,
)

__all__ = [
    "OUTAGE_MARGIN",
    "Policy",
    "RulePolicy",
    "ToolActivities",
    "complete_through_client",
    "drain_reports",
    "fixed_decision",
    "latency",
    "policy_description",
    "policy_digest",
    "store_outcome",
    "unexpected",
]
