"""Many sync local tool calls at once (issue 27): each attempt's ``local_seconds`` is the
tool's time, not time spent waiting for a thread.

A sync code tool runs on a thread. On the event loop's default executor (``min(32, CPUs +
4)`` threads, 6 on a machine of two CPUs) the calls past its size waited for a thread
inside their local activity's bound, so a turn of more parallel calls of a quick tool
than that timed out calls that never ran, and the model read them as failures.
"""

from __future__ import annotations

import os
import threading
import time

from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus

from .conftest import Harness

DEFAULT_EXECUTOR_THREADS = min(32, (os.cpu_count() or 1) + 4)
"""``ThreadPoolExecutor``'s default size, the loop's default executor's."""
CALLS = min(4 * DEFAULT_EXECUTOR_THREADS, 96)
"""Four rounds of that executor, the fourth ending past the bound (within the worker's 100
local activity slots: a call waiting for a slot would wait outside its bound)."""
TOOL_SECONDS = 0.5
LOCAL_SECONDS = 1.6
"""Room for one round of calls, with a second to spare."""

_lock = threading.Lock()
RAN: list[str] = []


def weigh_parcel(parcel: str) -> str:
    """Weigh a parcel on the scale (a blocking call).

    Args:
        parcel: The parcel.
    """
    with _lock:
        RAN.append(parcel)
    time.sleep(TOOL_SECONDS)
    return f"{parcel}: 2 kg"


async def test_more_parallel_sync_calls_than_default_threads_all_run_once(
    harness: Harness,
) -> None:
    RAN.clear()
    harness.registry.register(weigh_parcel, idempotent=True, local_seconds=LOCAL_SECONDS)
    parcels = [f"p{index}" for index in range(CALLS)]
    harness.fake.enqueue(
        Reply.tool_calls(*[ToolCall("weigh_parcel", {"parcel": p}) for p in parcels]),
        Reply.text("All weighed."),
    )
    spec = (
        AgentBuilder("weigher-many", registry=harness.registry)
        .model("fake-model")
        .tool("weigh_parcel")
        .limits(max_tool_calls_per_turn=CALLS, max_steps=CALLS + 10)
        .build()
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "Weigh them all.", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    assert [(c.status, c.result) for c in report.tool_calls] == [
        ("ok", f"{p}: 2 kg") for p in parcels
    ]
    assert sorted(RAN) == sorted(parcels)  # each once: none timed out waiting
