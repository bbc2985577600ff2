"""The feature table: every built-in a feature offers is a reserved name, and back."""

from __future__ import annotations

from typing import cast

from psych_runtime.specs import BUILTIN_TOOL_NAMES
from psych_runtime.workflows.features import FEATURES
from psych_runtime.workflows.kernel import Feature, RunView
from psych_runtime.workflows.kernel._feature import overriding


def _builtin_names() -> list[str]:
    # Building the table reads nothing of the Run: the view is only kept.
    view = cast(RunView, object())
    return [builtin.name for kind in FEATURES for builtin in kind(view).builtins()]


def test_the_builtins_are_exactly_the_reserved_tool_names() -> None:
    names = _builtin_names()
    assert len(names) == len(set(names)), names
    assert set(names) == BUILTIN_TOOL_NAMES


def test_the_builtins_are_offered_in_their_documented_order() -> None:
    # The order the model sees them in (and the catalogue activity stores them in).
    assert _builtin_names() == [
        "read_tool_output",
        "load_skill",
        "ask_question",
        "delegate",
        "search_mcp_tools",
        "update_tasks",
        "show_component",
        "spawn",
        "wait_children",
        "message_child",
    ]


def test_every_feature_has_its_own_name() -> None:
    names = [kind.name for kind in FEATURES]
    assert len(names) == len(set(names))
    assert all(issubclass(kind, Feature) for kind in FEATURES)


def test_the_turn_loop_calls_a_hook_only_on_the_features_that_use_it() -> None:
    view = cast(RunView, object())
    features = tuple(kind(view) for kind in FEATURES)
    names = {
        hook: [f.name for f in overriding(features, hook)]
        for hook in ("boundary", "after_call", "into_call", "open_items")
    }
    assert names == {
        "boundary": ["a2a", "compaction"],
        "after_call": ["mcp", "context", "compaction"],
        "into_call": ["mcp", "a2a", "tasks", "threads"],
        "open_items": [],
    }
