"""The shape's patch list is frozen, and every patch the workflows ask is in it.

A Run that recorded ``psych-shape-1`` answers each id in ``SHAPE_1`` without a marker
(``workflows/_shape.py``). Removing an id would make such a Run take the old path on
replay; adding one would make a Run recorded before that change take the new path. So the
set is pinned here, and a patch asked through ``has`` that is not in it (a change made
after the shape) must be named in ``AFTER_SHAPE_1`` below, on purpose.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from psych_runtime.workflows.kernel._shape import SHAPE_1

FROZEN = frozenset(
    {
        "psych-workflow-id",
        "psych-mcp",
        "psych-tasks",
        "psych-unsupported-fields",
        "psych-roles",
        "psych-roles-opt-in",
        "psych-model-v2",
        "psych-threads",
        "psych-continue-as-new",
        "psych-depth-chain",
        "psych-subagent-totals",
        "psych-step-depth",
        "psych-local-catalog",
        "psych-slim-payloads",
    }
)
"""SHAPE_1 as committed histories recorded it: never edit (gather later ids in a shape 2)."""

AFTER_SHAPE_1: frozenset[str] = frozenset()
"""Patch ids added after the shape, asked marker by marker."""

WORKFLOWS = Path(__file__).parents[2] / "workflows"


def _asked_patches() -> dict[str, str]:
    """Every id passed to ``has(...)`` in the workflows package -> where."""
    asked: dict[str, str] = {}
    for path in sorted(WORKFLOWS.rglob("*.py")):
        dotted = ".".join(path.relative_to(WORKFLOWS).with_suffix("").parts)
        module = importlib.import_module(f"psych_runtime.workflows.{dotted}")
        for node in ast.walk(ast.parse(path.read_text())):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "has"
            ):
                continue
            (arg,) = node.args
            if isinstance(arg, ast.Constant):
                value = arg.value
            elif isinstance(arg, ast.Name):
                value = getattr(module, arg.id)
            else:
                assert isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name)
                value = getattr(getattr(module, arg.value.id), arg.attr)
            assert isinstance(value, str), f"{dotted}:{node.lineno}: has({ast.unparse(arg)})"
            asked[value] = f"{dotted}:{node.lineno}"
    return asked


def test_the_shape_is_frozen() -> None:
    assert SHAPE_1 == FROZEN


def test_every_patch_asked_is_in_the_shape_or_named_as_later() -> None:
    asked = _asked_patches()
    assert len(asked) >= 10, asked  # the scan finds the calls it is meant to
    unknown = {patch: where for patch, where in asked.items() if patch not in FROZEN}
    assert set(unknown) <= AFTER_SHAPE_1, f"patches outside psych-shape-1: {unknown}"
