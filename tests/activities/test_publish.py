"""psych.version.publish: a composed Spec stored as a Version through the VersionStore."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from psych_runtime.activities.contract import VersionPublishInput
from psych_runtime.activities.versions import FileVersionStore, VersionActivities
from psych_runtime.specs import AgentSpec, ModelRef, SpecError, Version, WorkflowSpec
from psych_runtime.workers import WorkerSettings


def child(instructions: str = "You find things.") -> AgentSpec:
    return AgentSpec(name="finder", instructions=instructions, model=ModelRef(model="m"))


async def test_publish_stores_the_version_once_and_returns_it_whole(tmp_path: Path) -> None:
    store = FileVersionStore(tmp_path)
    activities = VersionActivities(store)
    env = ActivityEnvironment()
    first = await env.run(activities.publish, VersionPublishInput(run_id="r1", spec=child()))
    again = await env.run(activities.publish, VersionPublishInput(run_id="r2", spec=child()))
    assert first == again  # idempotent: the first published_at stands
    assert first.spec == child()
    assert store.get(first.hash) == first
    assert len(os.listdir(tmp_path)) == 1
    other = await env.run(activities.publish, VersionPublishInput(run_id="r1", spec=child("x")))
    assert other.hash != first.hash


class _WrongStore:
    """A store that hands back some other Version (a damaged store)."""

    def publish(self, spec: AgentSpec | WorkflowSpec) -> Version:
        return Version.of(child("something else"))

    def get(self, version_hash: str) -> Version:
        raise AssertionError("not read")


async def test_a_store_returning_another_specs_version_is_an_error() -> None:
    activities = VersionActivities(_WrongStore())
    with pytest.raises(SpecError, match="returned Version sha256:"):
        await ActivityEnvironment().run(
            activities.publish, VersionPublishInput(run_id="r1", spec=child())
        )


def test_the_worker_publishes_where_psych_publish_does(tmp_path: Path) -> None:
    settings = WorkerSettings.from_env({"PSYCH_STORE": str(tmp_path)})
    assert isinstance(settings.versions, FileVersionStore)
    assert settings.versions.root == tmp_path
    default = WorkerSettings.from_env({}).versions
    assert isinstance(default, FileVersionStore)
    assert default.root == Path(".psych/versions")
