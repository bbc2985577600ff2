"""The quickstart's first step on a machine whose ``python3`` is too old.

README: "On a fresh machine with Python 3.11+ and make". Where ``python3`` is older (Ubuntu
22.04's is 3.10) and 3.11 is installed beside it, ``make demo`` must say so and how to name
the newer one, before it makes a venv of the old one: pip's own refusal came after the venv
was made, and every later ``make demo PYTHON=python3.11`` reused that venv and failed again.
Each test runs the real Makefile in a directory of its own with a stand-in interpreter that
reports 3.10, so nothing is installed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

OLD_PYTHON = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "Python 3.10.12"; exit 0; fi
if [ "$1" = "-c" ]; then exit 1; fi  # the version check: too old
echo "a venv must not be made of this interpreter: $*" >&2
exit 3
"""


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """The Makefile and what its setup target depends on, nothing installed."""
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    (tmp_path / "pyproject.toml").touch()
    for package in ("specs", "workflows", "activities", "workers"):
        (tmp_path / package).mkdir()
    old = tmp_path / "python3.10"
    old.write_text(OLD_PYTHON)
    old.chmod(0o755)
    return tmp_path


def make(checkout: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", *args],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_an_interpreter_older_than_3_11_is_named_before_a_venv_is_made(checkout: Path) -> None:
    done = make(checkout, "demo", f"PYTHON={checkout / 'python3.10'}")
    assert done.returncode != 0
    assert "psych-runtime needs Python 3.11 or newer" in done.stderr
    assert "is Python 3.10.12" in done.stderr
    assert "make demo PYTHON=python3.11" in done.stderr
    assert "a venv must not be made" not in done.stderr
    assert not (checkout / ".venv").exists()


def test_a_missing_interpreter_is_named(checkout: Path) -> None:
    done = make(checkout, "PYTHON=no-such-python3")
    assert done.returncode != 0
    assert "no-such-python3 is not found" in done.stderr
    assert "make setup PYTHON=python3.11" in done.stderr


def test_a_venv_made_of_an_older_python_is_named_with_the_way_out(checkout: Path) -> None:
    (checkout / ".venv" / "bin").mkdir(parents=True)
    shutil.copy(checkout / "python3.10", checkout / ".venv" / "bin" / "python")
    done = make(checkout, "test", "PYTHON=python3.11")
    assert done.returncode != 0
    assert ".venv was made with Python 3.10.12" in done.stderr
    assert "make clean, then make test PYTHON=python3.11" in done.stderr
    assert "a venv must not be made" not in done.stderr


XDIST_OPTIONS_SINCE = {"--no-loadscope-reorder": (3, 8), "--loadscope-reorder": (3, 8)}
"""pytest-xdist's options that came after 3.6, and the release each came in."""


def test_the_xdist_options_make_passes_exist_in_the_lowest_xdist_allowed() -> None:
    # An older pytest-xdist (a venv made before, a pinned mirror) answers make unit with
    # "unrecognized arguments" before any test runs.
    makefile = (ROOT / "Makefile").read_text()
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (requirement,) = [
        r for r in dev["optional-dependencies"]["dev"] if r.startswith("pytest-xdist")
    ]
    found = re.search(r">=\s*([0-9]+)\.([0-9]+)", requirement)
    assert found is not None, f"no lower bound in {requirement!r}"
    lowest = (int(found[1]), int(found[2]))
    for option, since in XDIST_OPTIONS_SINCE.items():
        if option in makefile:
            assert lowest >= since, f"the Makefile passes {option}, {requirement!r} allows older"
