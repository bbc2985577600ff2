"""A benchmark's exit status through ``exit_after``, never through a finalizing interpreter
(whose ``atexit`` handlers would run: the SDK's threads can abort it there)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _run(body: str) -> subprocess.CompletedProcess[str]:
    program = (
        "import atexit\n"
        "from bench._process import exit_after\n"
        "atexit.register(lambda: print('finalized'))\n"
        "def main() -> int:\n"
        f"    {body}\n"
        "exit_after(main)\n"
        "print('not reached')\n"
    )
    return subprocess.run(
        [sys.executable, "-c", program], cwd=REPO, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("body", "status", "stderr"),
    [
        ("return 3", 3, ""),
        ("raise SystemExit(143)", 143, ""),
        ("raise SystemExit(None)", 0, ""),
        ("raise SystemExit(256 + 7)", 7, ""),
        ("raise SystemExit('no such section')", 1, "no such section"),
        ("raise SystemExit(['odd'])", 1, "['odd']"),
        ("raise RuntimeError('broken')", 1, "RuntimeError: broken"),
        ("raise KeyboardInterrupt", 130, "KeyboardInterrupt"),
    ],
)
def test_the_status_is_mains_and_the_interpreter_is_not_finalized(
    body: str, status: int, stderr: str
) -> None:
    done = _run(body)
    assert done.returncode == status, done.stderr
    assert done.stdout == ""  # neither 'not reached' nor the atexit handler's 'finalized'
    assert stderr in done.stderr
    if not stderr:
        assert done.stderr == ""
