"""The public surface of psych_runtime.specs."""

from __future__ import annotations

import importlib

import pytest

import psych_runtime.specs as specs

SEED_NAMES = [
    "AgentSpec",
    "WorkflowSpec",
    "AgentStep",
    "ToolStep",
    "WorkflowStepRef",
    "ModelRef",
    "Limits",
    "SuspensionPolicy",
    "CompactionPolicy",
    "SpawnEnvelope",
    "SubagentRef",
    "Skill",
    "CodeTool",
    "HttpTool",
    "McpServer",
    "McpOAuth",
    "A2APeer",
    "Version",
    "ValidationContext",
    "AgentBuilder",
    "WorkflowBuilder",
    "Spec",
]


def test_all_is_sorted_and_unique() -> None:
    assert specs.__all__ == sorted(specs.__all__)
    assert len(set(specs.__all__)) == len(specs.__all__)


@pytest.mark.parametrize("name", specs.__all__)
def test_every_name_in_all_is_importable(name: str) -> None:
    module = importlib.import_module("psych_runtime.specs")
    assert getattr(module, name) is not None
    namespace: dict[str, object] = {}
    exec(f"from psych_runtime.specs import {name}", namespace)
    assert namespace[name] is getattr(module, name)


@pytest.mark.parametrize("name", SEED_NAMES)
def test_seed_models_exported(name: str) -> None:
    assert name in specs.__all__
    assert hasattr(specs, name)


def test_star_import_matches_all() -> None:
    namespace: dict[str, object] = {}
    exec("from psych_runtime.specs import *", namespace)
    assert set(specs.__all__) <= set(namespace)


def test_error_hierarchy() -> None:
    assert issubclass(specs.VersionMismatch, specs.SpecError)
    for error in (
        specs.SpecError,
        specs.ValidationFailed,
        specs.RegistryError,
        specs.NotFound,
        specs.AccessDenied,
        specs.RunFailed,
    ):
        assert issubclass(error, specs.PsychError)
    assert issubclass(specs.SpecError, ValueError)
