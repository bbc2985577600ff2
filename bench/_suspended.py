"""Section 13, many Runs waiting for people (issue 27): ``make bench-suspended``.

    python -m bench._suspended [--runs 1000 10000] [--cache 1000]
    python -m bench._suspended WORKER TARGET TASK_QUEUE HOME MODEL_URL CACHE   (internal)

A psych worker runs in **its own process** (so its memory is its own ``VmRSS``), with its
workflow cache bounded (``max_cached_workflows``), on a fresh dev server. Each Run's model
(the fake model, in this process) calls ``cancel_order``, a destructive tool the worker's
Policy asks about, so every Run suspends waiting for an approval. For each count in
``--runs`` (cumulative: the Runs of a smaller count stay waiting), the benchmark
dispatches the Runs (50 at a time), waits until that many are suspended (the
``PsychStatus`` search attribute), and reads the worker's RSS; last it approves every Run
(50 updates at a time) and times until all have completed (or says where it stalled:
no Run completed for ``STALL_S``). The worker logs its full garbage collections
(``_gc_pauses.py``): how many ended in each phase, their total and the longest. JSON:
``bench/results/suspended-<timestamp>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench._agent import MODEL
from bench._gc_pauses import log_full_collections, pauses_between
from bench._process import dev_server, exit_after, run_until_terminated
from bench._table import table
from psych_runtime.activities import Endpoint, FileVersionStore, LocalBlobStore, ModelEndpoints
from psych_runtime.activities.tools import RulePolicy
from psych_runtime.specs import AgentBuilder, Scope, ToolRegistry
from psych_runtime.testing import FakeModel, Reply, ToolCall
from psych_runtime.workers import (
    WorkerSettings,
    connect,
    run_worker,
    tune_gc_for_serving,
)
from psych_runtime.workflows import PsychClient, RunHandle

RESULTS = Path(__file__).parent / "results"
REPO = Path(__file__).resolve().parents[1]
SCOPE = Scope(tenant="bench", principal="bench")
READY = "ready"
AT_ONCE = 50
"""Dispatches and approvals in flight at a time."""
CALL_ID = "cancel-1"
"""The id of each Run's one tool call (the fake model's responder gives it): the approval's."""

REGISTRY = ToolRegistry()


@REGISTRY.register(destructive=True)
def cancel_order(order_id: str) -> str:
    """Cancel an order (destructive: the Policy asks a person first).

    Args:
        order_id: The order's id.
    """
    return f"order {order_id} cancelled"


def responder(body: dict[str, Any]) -> Reply:
    """Turn 1 calls ``cancel_order``; once its result is in, the answer."""
    if any(m.get("role") == "tool" for m in body.get("messages") or []):
        return Reply.text("Cancelled.")
    return Reply.tool_calls(ToolCall("cancel_order", {"order_id": "42"}, id=CALL_ID))


# --- the worker process -------------------------------------------------------------------


GC_LOG = "worker-gc.log"
"""The worker's full collections, in the benchmark's home (``_gc_pauses.py``)."""


async def _worker(target: str, task_queue: str, home: str, model_url: str, cache: str) -> None:
    log_full_collections(Path(home) / GC_LOG)
    client = await connect(target)
    settings = WorkerSettings(
        task_queue=task_queue,
        registry=REGISTRY,
        blobs=LocalBlobStore(Path(home) / "blobs"),
        endpoints=ModelEndpoints(default=Endpoint(base_url=model_url, api_key="bench")),
        policy=RulePolicy(destructive="ask"),
    )
    async with run_worker(client, settings, max_cached_workflows=int(cache)):
        tune_gc_for_serving()  # as `psych worker` does
        print(READY, flush=True)
        await asyncio.Event().wait()


def rss_mb(pid: int) -> float:
    """The resident set size of process ``pid`` in MB (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


# --- the benchmark ------------------------------------------------------------------------


async def _bounded(count: int, make: Callable[[int], Awaitable[object]]) -> None:
    """``make(i)`` for every i below ``count``, ``AT_ONCE`` at a time."""
    next_index = 0

    async def lane() -> None:
        nonlocal next_index
        while next_index < count:
            index, next_index = next_index, next_index + 1
            await make(index)

    await asyncio.gather(*(lane() for _ in range(AT_ONCE)))


STALL_S = 120.0
"""Seconds without one more Run completed after which the approval phase is given up."""


async def _progress(count: Callable[[], Awaitable[int]], target: int, stall_s: float) -> int:
    """Wait until ``count()`` reaches ``target`` or stops growing for ``stall_s``; its last
    value."""
    last, since = -1, time.monotonic()
    while True:
        now = await count()
        if now >= target:
            return now
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since > stall_s:
            return now
        await asyncio.sleep(1.0)


async def _until(what: str, check: Callable[[], Awaitable[bool]], within: float) -> None:
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(0.5)


async def measure(counts: Iterable[int], cache: int, home: Path) -> dict[str, Any]:
    """Dispatch Runs up to each count, read the worker's RSS, then approve them all."""
    out: dict[str, Any] = {"cache": cache, "points": []}
    task_queue = f"bench-suspended-{uuid.uuid4().hex[:8]}"
    async with (
        dev_server(fast_dispatch=True) as env,
        FakeModel(models=(MODEL,), record=False) as fake,
    ):
        fake.responder = responder
        target = env.client.service_client.config.target_host
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench._suspended",
            "WORKER",
            target,
            task_queue,
            str(home),
            fake.base_url,
            str(cache),
            cwd=REPO,
            stdout=asyncio.subprocess.PIPE,
        )
        try:
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), timeout=120)
            if line.decode().strip() != READY:
                raise RuntimeError(f"the worker did not start: {line!r}")
            client = PsychClient(
                env.client,
                store=FileVersionStore(home / "versions"),
                task_queue=task_queue,
                registry=REGISTRY,
            )
            builder = AgentBuilder("suspender", registry=REGISTRY).model(MODEL)
            spec = builder.tool("cancel_order").build()
            runs: list[RunHandle] = []

            async def suspended() -> int:
                query = f'TaskQueue="{task_queue}" AND PsychStatus="suspended"'
                return (await env.client.count_workflows(query)).count

            def at_least(wanted: int) -> Callable[[], Awaitable[bool]]:
                async def check() -> bool:
                    return await suspended() >= wanted

                return check

            # One Run through approval first: the worker's code and connections are warm.
            warm = await client.dispatch(spec, "Cancel order 42.", scope=SCOPE)
            await _until("the warm-up Run to suspend", at_least(1), 120)
            await client.approve(warm, CALL_ID, scope=SCOPE)
            await client.result(warm, scope=SCOPE)
            await asyncio.sleep(2)
            out["idle_rss_mb"] = rss_mb(proc.pid)
            gc_log = home / GC_LOG

            def pauses(since: float) -> dict[str, Any]:
                return asdict(pauses_between(gc_log, since, time.time()))

            for count in sorted(counts):
                began = time.monotonic()
                window = time.time()

                async def dispatch(_: int) -> None:
                    runs.append(await client.dispatch(spec, "Cancel order 42.", scope=SCOPE))

                await _bounded(count - len(runs), dispatch)
                await _until(f"{count} Runs to suspend", at_least(count), 3600)
                seconds = time.monotonic() - began
                await asyncio.sleep(2)
                rss = rss_mb(proc.pid)
                out["points"].append(
                    {"runs": count, "rss_mb": rss, "dispatch_s": seconds, "gc": pauses(window)}
                )
                print(f"  ... {count} suspended: worker RSS {rss:.0f} MB", file=sys.stderr)
            began = time.monotonic()
            window = time.time()

            async def approve(index: int) -> None:
                await client.approve(runs[index], CALL_ID, scope=SCOPE)

            async def completed() -> int:
                query = f'TaskQueue="{task_queue}" AND ExecutionStatus="Completed"'
                return (await env.client.count_workflows(query)).count - 1  # the warm-up

            approving = asyncio.create_task(_bounded(len(runs), approve))
            done = await _progress(completed, len(runs), STALL_S)
            out["completed"] = done
            out["approve_to_completed_s"] = time.monotonic() - began
            out["rss_after_mb"] = rss_mb(proc.pid)
            out["approve_gc"] = pauses(window)
            if done < len(runs):
                approving.cancel()
                await asyncio.gather(approving, return_exceptions=True)
                print(f"  ... stalled: {done:,} of {len(runs):,} completed", file=sys.stderr)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    return out


def text(result: dict[str, Any]) -> str:
    """The section's table."""
    idle = result["idle_rss_mb"]
    rows = [
        [
            f"{point['runs']:,} suspended",
            point["rss_mb"],
            (point["rss_mb"] - idle) * 1024 / point["runs"],
            point["dispatch_s"],
            point["gc"]["count"],
            point["gc"]["total_s"],
            point["gc"]["longest_ms"],
        ]
        for point in result["points"]
    ]
    approve_gc = result["approve_gc"]
    total = result["points"][-1]["runs"]
    done = result["completed"]
    approving = (
        f"Approving all {total:,}: {result['approve_to_completed_s']:.1f} s until all completed"
        if done >= total
        else f"Approving all {total:,}: STALLED, {done:,} completed after "
        f"{result['approve_to_completed_s']:.1f} s (none more for {STALL_S:g} s)"
    )
    head = (
        f"13. Suspended Runs on one worker (its own process, max_cached_workflows="
        f"{result['cache']}): idle after one Run {idle:.0f} MB RSS. {approving}; RSS then "
        f"{result['rss_after_mb']:.0f} MB; meanwhile {approve_gc['count']} full collections in "
        f"the worker stopped it for {approve_gc['total_s']:.1f} s (the longest "
        f"{approve_gc['longest_ms']:.0f} ms)."
    )
    headers = [
        "",
        "worker RSS MB",
        "KB per Run over idle",
        "dispatch s",
        "full GCs",
        "GC s",
        "longest GC ms",
    ]
    return head + "\n\n" + table(headers, rows)


def main(argv: list[str] | None = None) -> int:
    """The benchmark, or (``WORKER ...``) its worker process."""
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "WORKER":
        asyncio.run(_worker(*args[1:6]))
        return 0
    parser = argparse.ArgumentParser(prog="python -m bench._suspended", description=__doc__)
    parser.add_argument("--runs", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--cache", type=int, default=1000, help="max_cached_workflows")
    parsed = parser.parse_args(args)
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="psych-bench-suspended-") as home:
        result = run_until_terminated(measure(parsed.runs, parsed.cache, Path(home)))
    print(text(result))
    print(f"\n({time.monotonic() - began:.0f} s)")
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = RESULTS / f"suspended-{stamp}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    exit_after(main)
