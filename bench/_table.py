"""Medians and plain-text tables."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def median(values: Sequence[float]) -> float:
    """The median of ``values`` (NaN when empty, so a missing figure shows as ``nan``)."""
    return statistics.median(values) if values else float("nan")


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A left-aligned first column and right-aligned other columns, two spaces apart."""
    cells = [[str(h) for h in headers], *[[_cell(v) for v in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for index, row in enumerate(cells):
        rest = zip(row[1:], widths[1:], strict=True)
        parts = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in rest]
        lines.append("  ".join(parts).rstrip())
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _cell(value: object) -> str:
    if isinstance(value, float):
        if value != value:  # NaN
            return "-"
        return f"{value:,.2f}" if abs(value) < 10 else f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def spread(values: Sequence[float]) -> str:
    """``median [min-max]`` of ``values`` (``-`` for none)."""
    if not values:
        return "-"
    return f"{median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def rotated(kinds: tuple[str, ...], index: int) -> tuple[str, ...]:
    """``kinds`` starting at round ``index``'s kind: which kind goes first (after the
    previous round's last) changes from round to round."""
    start = index % len(kinds)
    return kinds[start:] + kinds[:start]
