"""What the dev server did, counted by the server itself: its Prometheus ``/metrics``.

The server counts every RPC it serves (``service_requests``, by service and operation)
and every persistence operation (``persistence_requests``). Read before and after a batch
of Runs and divided by the turns taken, they say how much server work a turn asked for,
independently of how much CPU that work took on a shared machine.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass

import httpx

Counters = dict[tuple[str, str, str], float]
"""(metric, service, operation) -> count so far."""

_SAMPLE = re.compile(r"^(service_requests|persistence_requests)\{([^}]*)\} ([0-9.eE+]+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


@dataclass(frozen=True)
class ServerWork:
    """Server operations per turn, from two reads of its counters."""

    frontend_rpcs: float
    """RPCs the frontend served (workers' polls and completions, the client's calls)."""
    history_rpcs: float
    """RPCs the history service served (each frontend completion becomes one or more)."""
    persistence_ops: float
    """Reads and writes of the server's store, all kinds."""
    execution_writes: float
    """``UpdateWorkflowExecution`` and ``CreateWorkflowExecution``: a Run's state written."""
    history_reads: float
    """``ReadHistoryBranch``: history events read back (workflow tasks' new events)."""


async def read_counters(http: httpx.AsyncClient, port: int) -> Counters:
    """The server's counters now: (metric, service, operation) -> count."""
    response = await http.get(f"http://127.0.0.1:{port}/metrics")
    response.raise_for_status()
    counters: Counters = {}
    for line in response.text.splitlines():
        sample = _SAMPLE.match(line)
        if sample is None:
            continue
        metric, labels, value = sample.groups()
        named = dict(_LABEL.findall(labels))
        key = (metric, named.get("service_name", ""), named.get("operation", ""))
        counters[key] = counters.get(key, 0.0) + float(value)
    return counters


_REPORT_SECONDS = 1.1
"""More than the server's metrics reporting interval (its counters reach /metrics in
batches, about once a second)."""


async def settled_counters(http: httpx.AsyncClient, port: int, *, tries: int = 10) -> Counters:
    """The counters once the frontend's RPC counts, long polls aside, stopped changing
    (the work just done has all been reported). Long polls are left out of the check:
    each idle poller's poll comes back empty about once a minute, and the workers'
    pollers, started together, come back together for several seconds.

    Raises:
        RuntimeError: they still changed after ``tries`` reads: something else is calling
            the server, and a batch's counts would include it.
    """
    counters = await read_counters(http, port)
    for _ in range(tries):
        await asyncio.sleep(_REPORT_SECONDS)
        again = await read_counters(http, port)
        if _answered(again) == _answered(counters):
            return again
        counters = again
    raise RuntimeError(
        f"the dev server's RPC counts (long polls aside) kept changing for "
        f"{tries * _REPORT_SECONDS:.0f} s after "
        "a batch: something else is calling it"
    )


def _answered(counters: Counters) -> float:
    """The frontend's RPCs other than long polls."""
    return sum(
        count
        for (metric, service, operation), count in counters.items()
        if metric == "service_requests"
        and service == "frontend"
        and not operation.startswith("Poll")
    )


def work_per_turn(before: Counters, after: Counters, turns: int) -> ServerWork:
    """What the server did between two reads, per turn taken."""
    done = {key: count - before.get(key, 0.0) for key, count in after.items()}

    def total(metric: str, service: str | None = None, ops: tuple[str, ...] = ()) -> float:
        return (
            sum(
                count
                for (name, svc, op), count in done.items()
                if name == metric and (service is None or svc == service) and (not ops or op in ops)
            )
            / turns
        )

    return ServerWork(
        frontend_rpcs=total("service_requests", "frontend"),
        history_rpcs=total("service_requests", "history"),
        persistence_ops=total("persistence_requests"),
        execution_writes=total(
            "persistence_requests", ops=("UpdateWorkflowExecution", "CreateWorkflowExecution")
        ),
        history_reads=total("persistence_requests", ops=("ReadHistoryBranch",)),
    )
