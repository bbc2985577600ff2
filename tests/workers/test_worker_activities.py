"""build_worker registers every ``@activity.defn`` in psych_runtime.activities, once."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

import psych_runtime.activities
from psych_runtime.activities import ACTIVITY_NAMES, ActivityClass, LocalBlobStore, activity_name
from psych_runtime.workers import WorkerSettings, build_worker, egress_for


def defined_activities() -> dict[Callable[..., Any], type | None]:
    """Every ``@activity.defn`` function in psych_runtime.activities' modules (its
    subpackages' too), with the class that defines it (None for a module-level one)."""
    found: dict[Callable[..., Any], type | None] = {}
    package = psych_runtime.activities
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        module = importlib.import_module(info.name)
        for _, member in inspect.getmembers(module):
            if getattr(member, "__module__", None) != module.__name__:
                continue
            if inspect.isclass(member):
                for _, fn in inspect.getmembers(member, inspect.isfunction):
                    if activity_name(fn) is not None and fn.__qualname__.startswith(
                        member.__qualname__ + "."
                    ):
                        found[fn] = member
            elif callable(member) and activity_name(member) is not None:
                found[member] = None
    return found


async def test_every_defined_activity_is_registered_once(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    defined = defined_activities()
    settings = WorkerSettings(
        task_queue=f"activities-{uuid.uuid4().hex[:12]}", blobs=LocalBlobStore(tmp_path)
    )
    egress = egress_for(settings)
    try:
        worker = build_worker(dev_env.client, settings, egress=egress)
        # Started and stopped, so no half-made worker outlives the test.
        async with worker:
            registered = worker.config(active_config=True)["activities"]
    finally:
        await egress.aclose()

    functions = [getattr(fn, "__func__", fn) for fn in registered]
    assert len(functions) == len(set(functions))
    assert set(functions) == set(defined)
    assert sorted(activity_name(fn) or "" for fn in registered) == sorted(ACTIVITY_NAMES)
    # Each lives on a class that lists its own, which is all build_worker relies on.
    owners = set(defined.values())
    assert all(owner is not None and issubclass(owner, ActivityClass) for owner in owners)


async def test_a_built_worker_ignores_only_the_sdks_benign_cancel_warning(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    # The core may cancel a local activity that has just finished; the SDK warns from its
    # poll loop, which a process running with warnings as errors (as these tests do) lost
    # its activity worker to. Any other warning of that module still surfaces.
    settings = WorkerSettings(
        task_queue=f"activities-{uuid.uuid4().hex[:12]}", blobs=LocalBlobStore(tmp_path)
    )
    egress = egress_for(settings)
    try:
        # Started and stopped, as above, so no half-made worker outlives the test.
        async with build_worker(dev_env.client, settings, egress=egress):
            pass
    finally:
        await egress.aclose()

    def from_the_sdk(message: str) -> None:
        module = "temporalio.worker._activity"
        warnings.warn_explicit(message, UserWarning, "_activity.py", 227, module=module)

    from_the_sdk("Cannot find activity to cancel for token b'local_act_\\x01'")
    with pytest.raises(UserWarning, match="something else"):
        from_the_sdk("something else")
