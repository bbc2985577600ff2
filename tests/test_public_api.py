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
        "psych_runtime.testing",
        "psych_runtime.workers",
    ],
)
def test_all_is_sorted_and_importable(package: str) -> None:
    module = importlib.import_module(package)
    names = list(module.__all__)
    assert names == sorted(names)
    assert len(names) == len(set(names))
    missing = [name for name in names if not hasattr(module, name)]
    assert missing == []
