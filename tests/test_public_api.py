"""Each package re-exports its public names under a sorted ``__all__``, all importable."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize(
    "package",
    [
        "psych_runtime.specs",
        "psych_runtime.workflows",
        "psych_runtime.activities",
        "psych_runtime.activities.blobs",
        "psych_runtime.activities.contract",
        "psych_runtime.activities.hooks",
        "psych_runtime.activities.live",
        "psych_runtime.activities.mcp",
        "psych_runtime.activities.model",
        "psych_runtime.activities.secrets",
        "psych_runtime.activities.telemetry",
        "psych_runtime.activities.tools",
        "psych_runtime.activities.versions",
        "psych_runtime.testing",
        "psych_runtime.workers",
        "psych_runtime.workers.cli",
        "psych_runtime.workers.codec",
        "psych_runtime.workers.console",
        "psych_runtime.workers.fleet",
        "psych_runtime.workers.serve",
        "psych_runtime.workers.serve.a2a",
        "psych_runtime.workers.serve.console",
    ],
)
def test_all_is_sorted_and_importable(package: str) -> None:
    module = importlib.import_module(package)
    names = list(module.__all__)
    assert names == sorted(names)
    assert len(names) == len(set(names))
    missing = [name for name in names if not hasattr(module, name)]
    assert missing == []
