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
from psych_runtime.activities.contract import (
    MODEL_CALL,
    POLICY_DECIDE,
    TOOL_CATALOG,
    TOOL_FINISH_EXTERNAL,
    TOOL_READ_OUTPUT,
    TOOL_RUN_CODE,
    TOOL_SEND_HTTP,
    TOOL_STORE_RESULT,
)
from psych_runtime.specs import ToolRegistry


def names(activities: ActivityClass) -> list[str | None]:
    return [activity_name(fn) for fn in activities.activities()]


async def test_model_activities_list_the_model_call(tmp_path: Path) -> None:
    async with ModelActivities(endpoints=ModelEndpoints(), blobs=LocalBlobStore(tmp_path)) as model:
        # complete (the full form the activity runs) is no activity of its own.
        assert model.activities() == [model.call]
        assert names(model) == [MODEL_CALL]


def test_tool_activities_list_all_seven(tmp_path: Path) -> None:
    tools = ToolActivities(registry=ToolRegistry(), blobs=LocalBlobStore(tmp_path))
    assert tools.activities() == [
        tools.catalog,
        tools.decide,
        tools.finish_external,  # from its StoredResults part
        tools.read_output,
        tools.run_code,
        tools.send_http,
        tools.store_result,  # from its StoredResults part
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
        TOOL_CATALOG,
        POLICY_DECIDE,
        "tests.extra",
        TOOL_FINISH_EXTERNAL,
        TOOL_READ_OUTPUT,
        TOOL_RUN_CODE,
        TOOL_SEND_HTTP,
        TOOL_STORE_RESULT,
    ]


def test_activity_name_of_a_plain_callable_is_none() -> None:
    assert activity_name(test_activity_name_of_a_plain_callable_is_none) is None
