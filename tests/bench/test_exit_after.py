"""A benchmark's exit status through ``exit_after`` (never a finalizing interpreter)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

MAINS = {
    "returns 3": "return 3",
    "raises SystemExit(143)": "raise SystemExit(143)",
    "raises SystemExit(None)": "raise SystemExit(None)",
    "raises SystemExit('no such section')": "raise SystemExit('no such section')",
    "raises RuntimeError('broken')": "raise RuntimeError('broken')",
}


def _run(body: str) -> subprocess.CompletedProcess[str]:
    program = (
        "from bench._process import exit_after\n"
        "def main() -> int:\n"
        f"    {body}\n"
        "exit_after(main)\n"
        "print('not reached')\n"
    )
    return subprocess.run(
        [sys.executable, "-c", program], cwd=REPO, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("name", "status", "stderr"),
    [
        ("returns 3", 3, ""),
        ("raises SystemExit(143)", 143, ""),
        ("raises SystemExit(None)", 0, ""),
        ("raises SystemExit('no such section')", 1, "no such section"),
        ("raises RuntimeError('broken')", 1, "RuntimeError: broken"),
    ],
)
def test_the_status_is_mains_and_nothing_runs_after(name: str, status: int, stderr: str) -> None:
    done = _run(MAINS[name])
    assert done.returncode == status, done.stderr
    assert done.stdout == ""
    assert stderr in done.stderr
    if not stderr:
        assert done.stderr == ""
