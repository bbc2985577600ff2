"""``psych --help`` and ``psych validate`` import only what they need: none of the heavy
dependencies the worker, the client and the HTTP API use (issue 28: they start in well
under half a second). Each command runs in a fresh interpreter, which then lists what it
imported; the parser's copies of other modules' defaults are checked against them."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta

import pytest

from .conftest import EXAMPLES, ROOT

HEAVY = ("temporalio", "opentelemetry", "mcp", "cryptography", "fastapi", "uvicorn", "h11")

_PROBE = """
import json, sys
from psych_runtime.workers.cli import main
try:
    status = main(sys.argv[1:])
except SystemExit as done:
    status = done.code
print(json.dumps({"status": status, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def _imported(*argv: str) -> tuple[int, set[str], str]:
    status, modules, out = _imported_modules(*argv)
    return status, {name.split(".")[0] for name in modules}, out


def _imported_modules(*argv: str) -> tuple[int, set[str], str]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # The probe's report is its last line of its own; a library may still log after it
    # (the Temporal client's core, at exit), so the last line that is the report is read.
    lines = [line for line in done.stderr.splitlines() if line.startswith('{"status"')]
    assert lines, done.stderr
    report = json.loads(lines[-1])
    return report["status"], set(report["modules"]), done.stdout


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["validate", str(EXAMPLES / "support-agent.yaml"), "--tools", "examples/tools.py:registry"],
        [
            "validate",
            str(EXAMPLES / "onboarding-workflow.yaml"),
            "--tools",
            "examples/tools.py:registry",
        ],
        ["schema"],
    ],
    ids=["help", "validate-agent", "validate-workflow", "schema"],
)
def test_a_light_command_imports_no_heavy_dependency(argv: list[str]) -> None:
    status, modules, out = _imported(*argv)
    assert status == 0, out
    assert sorted(modules.intersection(HEAVY)) == []
    if argv[0] == "validate":
        assert out.endswith(": valid\n")


def test_validate_loads_neither_the_payload_contract_nor_the_display_models() -> None:
    # What validate need not build or import: the activities' payload contract (pulled in
    # by the hooks of the settings files), asyncio (only --check-connections connects),
    # the display components' models and schemas (built-in tools, not Spec fields).
    status, modules, out = _imported_modules(
        "validate", str(EXAMPLES / "support-agent.yaml"), "--tools", "examples/tools.py:registry"
    )
    assert status == 0, out
    unwanted = {"asyncio", "psych_runtime.activities.contract", "psych_runtime.specs._display"}
    assert sorted(modules & unwanted) == []


def test_help_does_not_even_load_the_spec_models() -> None:
    status, modules, out = _imported("--help")
    assert status == 0
    assert "validate" in out and "schema" in out
    assert {"pydantic", "yaml", "httpx"}.isdisjoint(modules)


def test_a_command_that_needs_temporal_still_loads_it() -> None:
    # The probe can tell: a Run command imports the SDK (and fails to connect, exit 1).
    status, modules, _ = _imported("status", "psych-default-x", "--address", "127.0.0.1:9")
    assert status == 1
    assert "temporalio" in modules


def test_the_parsers_copies_of_defaults_equal_their_sources() -> None:
    from psych_runtime.workers import codec
    from psych_runtime.workers.cli import _parser, _parser_serving
    from psych_runtime.workers.fleet import WORKFLOW_TYPES
    from psych_runtime.workers.serve import DEFAULT_MAX_BODY_BYTES
    from psych_runtime.workflows import UPDATE_TIMEOUT, RunStatus

    assert tuple(status.value for status in RunStatus) == _parser.RUN_STATUSES
    assert timedelta(seconds=_parser.UPDATE_SECONDS) == UPDATE_TIMEOUT
    assert _parser_serving.WORKFLOW_TYPES == WORKFLOW_TYPES
    assert _parser_serving.ENV_KEYS == codec.ENV_KEYS
    assert _parser_serving.ENV_KEY_FILE == codec.ENV_KEY_FILE
    assert _parser_serving.DEFAULT_MAX_BODY_BYTES == DEFAULT_MAX_BODY_BYTES
