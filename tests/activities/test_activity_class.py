"""Each activity class lists its own ``@activity.defn`` methods, found by introspection."""

from __future__ import annotations

from pathlib import Path

from temporalio import activity

from psych_runtime.activities import (
    ActivityClass,
    LocalBlobStore,
    ModelActivities,
    ModelEndpoints,
    ToolActivities,
    activity_name,
)
from psych_runtime.specs import ToolRegistry


def names(activities: ActivityClass) -> list[str | None]:
    return [activity_name(fn) for fn in activities.activities()]


async def test_model_activities_list_complete_and_its_v2_and_v3(tmp_path: Path) -> None:
    async with ModelActivities(endpoints=ModelEndpoints(), blobs=LocalBlobStore(tmp_path)) as model:
        assert model.activities() == [model.complete, model.complete_v2, model.complete_v3]
        assert names(model) == [
            "psych.model.complete",
            "psych.model.complete.v2",
            "psych.model.complete.v3",
        ]


def test_tool_activities_list_all_seven(tmp_path: Path) -> None:
    tools = ToolActivities(registry=ToolRegistry(), blobs=LocalBlobStore(tmp_path))
    assert tools.activities() == [
        tools.catalog,
        tools.code,
        tools.code_v2,
        tools.decide,
        tools.http,
        tools.http_v2,
        tools.read_output,
    ]
    # Bound to this instance, so its collaborators serve the calls.
    assert all(getattr(fn, "__self__", None) is tools for fn in tools.activities())


class Extended(ToolActivities):
    @activity.defn(name="tests.extra")
    async def extra(self, text: str) -> str:
        return text

    async def helper(self) -> None:
        """Not an activity: never listed."""


def test_a_new_defn_method_is_listed_without_touching_any_list(tmp_path: Path) -> None:
    extended = Extended(registry=ToolRegistry(), blobs=LocalBlobStore(tmp_path))
    assert names(extended) == [
        "psych.tool.catalog",
        "psych.tool.code",
        "psych.tool.code.v2",
        "psych.policy.decide",
        "tests.extra",
        "psych.tool.http",
        "psych.tool.http.v2",
        "psych.tool.read_output",
    ]


def test_activity_name_of_a_plain_callable_is_none() -> None:
    assert activity_name(test_activity_name_of_a_plain_callable_is_none) is None
