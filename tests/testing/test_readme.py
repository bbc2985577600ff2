"""The example in psych_runtime.testing's README runs as written, as a user's test would."""

from __future__ import annotations

import asyncio
import re
import sys
from importlib import resources
from pathlib import Path

PYTEST_INI = """\
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
filterwarnings = error
"""


def readme_example() -> str:
    # Read from the installed package: the README ships with it (package data).
    text = (resources.files("psych_runtime.testing") / "README.md").read_text()
    examples: list[str] = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    assert len(examples) == 1
    return examples[0]


async def test_readme_example_passes_in_a_fresh_pytest(tmp_path: Path) -> None:
    (tmp_path / "test_example.py").write_text(readme_example())
    (tmp_path / "pytest.ini").write_text(PYTEST_INI)
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "test_example.py",
        cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    async with asyncio.timeout(120):
        out, _ = await child.communicate()
    assert child.returncode == 0, out.decode()
    assert "1 passed" in out.decode()
