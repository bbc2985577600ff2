"""``psych_runtime.workflows`` imports a name where it lives only when it is first used: the
workflow sandbox imports a Run's workflow module, and so this package, afresh for every Run
(``workflows/__init__.py``, ``_HOMES``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import psych_runtime.workflows as package


def imported_after(statement: str) -> set[str]:
    """The psych modules a fresh interpreter holds after running ``statement``."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys; {statement}; "
            "print('\\n'.join(m for m in sys.modules if m.startswith('psych_runtime')))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(out.split())


def test_a_runs_module_imports_neither_the_client_nor_the_other_run_kind() -> None:
    agent_run = imported_after("import psych_runtime.workflows.runs._agent_run")
    assert "psych_runtime.workflows.client._client" not in agent_run
    assert "psych_runtime.workflows.runs._workflow_run" not in agent_run
    workflow_run = imported_after("import psych_runtime.workflows.runs._workflow_run")
    assert "psych_runtime.workflows.runs._agent_run" not in workflow_run


def test_the_package_alone_imports_nothing_it_names() -> None:
    assert imported_after("import psych_runtime.workflows") == {
        "psych_runtime",
        "psych_runtime.workflows",
    }


def test_every_name_is_found_where_the_package_says_it_lives() -> None:
    for name, home in package._HOMES.items():
        assert getattr(package, name) is getattr(sys.modules[home], name), name
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchName'"):
        package.NoSuchName  # noqa: B018
