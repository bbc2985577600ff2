"""How ``psych report`` and ``psych run`` show a Run's children and what a subagent lacks.

One line per delegated or spawned child (its ending and what it spent, rolled up into the
parent's totals), one per tool or MCP server a subagent asked for and was not granted, and
the progress line of a ``child_settled`` record.
"""

from __future__ import annotations

from psych_runtime.workflows import ChildSettled, RunReport, Totals


def _spent(totals: Totals) -> str:
    usage = totals.usage
    cost = "cost unknown" if totals.cost is None else f"cost {totals.cost:.6f}"
    return (
        f"{totals.model_calls} model calls, {totals.tool_calls} tool calls, "
        f"{usage.input_tokens} in / {usage.output_tokens} out, {cost}"
    )


def _short(text: str, limit: int) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def child_line(child: ChildSettled) -> str:
    """One child's ending and spending, as the report shows it."""
    return (
        f"{child.run} ({child.agent}, {child.via}) {child.status}: {_spent(child.totals)}; "
        f"{_short(child.reason, 100)}"
    )


def child_fields(report: RunReport) -> list[tuple[str, str]]:
    """The report's rows for its children and for what its subagent Spec lacks."""
    fields = [
        (f"child {index}", child_line(child)) for index, child in enumerate(report.children, 1)
    ]
    fields += [
        ("left out", f"{left.what} {left.name!r}: {left.reason}") for left in report.left_out
    ]
    return fields


def child_settled_line(record: ChildSettled) -> str:
    """The progress line of a ``child_settled`` record."""
    return (
        f"child {record.run} ({record.agent}, {record.via}) settled {record.status}: "
        f"{_spent(record.totals)}"
    )
