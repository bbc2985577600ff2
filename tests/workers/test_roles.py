"""Worker roles without a server: naming, parsing, what each role registers, its limits."""

from __future__ import annotations

from pathlib import Path

import pytest

from psych_runtime.activities import (
    ACTIVITY_NAMES,
    ACTIVITY_ROLES,
    ROLES,
    activity_name,
    role_task_queue,
)
from psych_runtime.activities.blobs import LocalBlobStore
from psych_runtime.activities.contract import (
    MODEL_CALL,
    MODEL_COMPACT,
    TOOL_RUN_CODE,
    TOOL_SEND_HTTP,
)
from psych_runtime.specs import SpecError
from psych_runtime.workers import WorkerSettings, activities_for, egress_for
from psych_runtime.workers.fleet import (
    Concurrency,
    activities_of_role,
    deployment_version,
    parse_roles,
    runs_roles_apart,
    version_from_env,
)


def test_every_activity_has_a_role_and_roles_name_their_queues() -> None:
    assert sorted(ACTIVITY_ROLES) == sorted(ACTIVITY_NAMES)
    assert set(ACTIVITY_ROLES.values()) == set(ROLES)
    assert [role_task_queue("psych", role) for role in ROLES] == [
        "psych",
        "psych-model",
        "psych-tools",
    ]
    with pytest.raises(SpecError, match="unknown worker role 'gpu'"):
        role_task_queue("psych", "gpu")


def test_roles_parse_in_order_without_repeats_and_default_to_all() -> None:
    assert parse_roles([]) == ROLES
    assert parse_roles([""]) == ROLES
    assert parse_roles(["all"]) == ROLES
    assert parse_roles(["tools", "model,tools"]) == ("model", "tools")
    with pytest.raises(SpecError, match="unknown worker role 'gpu'"):
        parse_roles(["model,gpu"])
    assert WorkerSettings.from_env({"PSYCH_ROLES": "tools"}).roles == ("tools",)


async def test_each_role_registers_its_own_activities(tmp_path: Path) -> None:
    settings = WorkerSettings(blobs=LocalBlobStore(tmp_path))
    egress = egress_for(settings)
    every = activities_for(settings, egress)
    await egress.aclose()
    names = {role: {activity_name(fn) for fn in activities_of_role(every, role)} for role in ROLES}
    assert names["model"] == {MODEL_CALL, MODEL_COMPACT}
    assert {TOOL_RUN_CODE, TOOL_SEND_HTTP} <= names["tools"]
    assert MODEL_CALL not in names["tools"]
    # Local activities and Runs not dispatched roles_apart (every activity on the Run's own
    # queue) need every activity on the workflows role.
    assert names["workflows"] == {activity_name(fn) for fn in every}


def test_concurrency_defaults_and_environment() -> None:
    assert Concurrency.from_env({}) == Concurrency(100, 100, 100)
    limits = Concurrency.from_env(
        {"PSYCH_MAX_WORKFLOW_TASKS": "7", "PSYCH_MAX_MODEL_CALLS": "3", "PSYCH_MAX_TOOL_CALLS": "5"}
    )
    assert limits.worker_options("workflows") == {"max_concurrent_workflow_tasks": 7}
    assert limits.worker_options("model") == {"max_concurrent_activities": 3}
    assert limits.worker_options("tools") == {"max_concurrent_activities": 5}
    with pytest.raises(SpecError, match="PSYCH_MAX_TOOL_CALLS='0' must be at least 1"):
        Concurrency.from_env({"PSYCH_MAX_TOOL_CALLS": "0"})
    with pytest.raises(SpecError, match="is not a whole number"):
        Concurrency.from_env({"PSYCH_MAX_MODEL_CALLS": "many"})


def test_a_deployment_needs_both_its_name_and_a_build_id() -> None:
    assert version_from_env({}) is None
    version = version_from_env({"PSYCH_DEPLOYMENT": "psych", "PSYCH_BUILD_ID": "abc"})
    assert version is not None
    assert version.to_canonical_string() == "psych.abc"
    with pytest.raises(SpecError, match="both a deployment name and a build id"):
        deployment_version("psych", None)
    with pytest.raises(SpecError, match=r"may not contain '\.'"):
        deployment_version("a.b", "1")


def test_a_worker_says_roles_apart_when_it_does_not_run_every_role_unless_told() -> None:
    assert runs_roles_apart(ROLES, None) is False
    assert runs_roles_apart(("workflows",), None) is True
    assert runs_roles_apart(("workflows", "tools"), None) is True
    assert runs_roles_apart(ROLES, True) is True
    assert runs_roles_apart(("workflows",), False) is False
    assert WorkerSettings.from_env({"PSYCH_ROLES": "workflows"}).roles_apart is None
    assert WorkerSettings.from_env({"PSYCH_ROLES_APART": "1"}).roles_apart is True
    assert WorkerSettings.from_env({"PSYCH_ROLES_APART": "off"}).roles_apart is False
    assert WorkerSettings.from_env({"PSYCH_ROLES_APART": " "}).roles_apart is None
    with pytest.raises(SpecError, match=r"PSYCH_ROLES_APART='maybe' is neither yes nor no"):
        WorkerSettings.from_env({"PSYCH_ROLES_APART": "maybe"})
