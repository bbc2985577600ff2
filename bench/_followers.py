"""Section 9: what followers of one Run cost its worker, its history and the server.

The worker runs in its own process (``python -m bench._followers WORKER ...``), so its CPU
is read from ``/proc/<pid>/stat`` alone, apart from the followers, the fake model and the
client, which all run in the benchmark process. The same scripted AgentRun (``TURNS`` turns,
each model call held ``MODEL_SECONDS`` by the fake model, one code tool call per turn) runs
with no follower; with 1, 10 and 100 streams of ``PsychClient.stream`` through one client
(they share one follower: the history long-poll, then one records query per completed
workflow task); with 10 ``RecordFollower``s of their own (what 10 separate processes cost);
and with 100 followers polling the records query every 250 ms (what ``stream`` did before).
Each follower starts as the Run is dispatched and reads it from seq 0 to ``run_settled``.
Per row: the worker's CPU per second of the Run's wall time (and the ratio to no followers,
measured in the same run), the server's, the Run's history (events and the bytes the server
accounts), the records queries per follower per second, and the delivery latency: the
follower's wall clock when a record reached it minus the record's ``at`` (the time of the
workflow task that wrote it).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment

from bench._process import _children, _cpu_of, exit_after
from bench._table import median, table
from psych_runtime.activities import Endpoint, FileVersionStore, LocalBlobStore, ModelEndpoints
from psych_runtime.specs import AgentBuilder, AgentSpec, Scope, ToolRegistry
from psych_runtime.testing import FakeModel, Reply, ToolCall
from psych_runtime.workers import WorkerSettings, connect, run_worker
from psych_runtime.workflows import PsychClient, Record, RunHandle
from psych_runtime.workflows.client._follow import BUSY_RETRY_SECONDS, RecordFollower

SCOPE = Scope(tenant="bench", principal="bench")
MODEL = "fake-model"
TURNS = 10
MODEL_SECONDS = 0.2
"""How long the fake model holds each call: a Run that lasts, as model calls make them."""
POLL_SECONDS = 0.25
"""The interval of the records-query poll ``stream`` used before it was pushed."""
READY = "ready"
_ASK_AGAIN = (
    RPCStatusCode.RESOURCE_EXHAUSTED,
    RPCStatusCode.DEADLINE_EXCEEDED,
    RPCStatusCode.CANCELLED,
)
REPO = Path(__file__).resolve().parents[1]

REGISTRY = ToolRegistry()


@REGISTRY.register
async def lookup(turn: int) -> str:
    """Look up this turn's order.

    Args:
        turn: The turn number.
    """
    return f"order {turn}: delivered"


Mode = Literal["stream", "own", "polled"]


@dataclass(frozen=True)
class FollowerSample:
    """One Run with ``followers`` following it."""

    followers: int
    mode: Mode
    wall_s: float
    worker_cpu_s: float
    server_cpu_s: float
    history_events: int
    history_bytes: int
    queries: int
    retried: int
    """Queries no worker answered in time or the server refused as busy, asked again."""
    latencies_ms: tuple[float, ...]

    @property
    def worker_cpu_per_s(self) -> float:
        return self.worker_cpu_s / self.wall_s

    @property
    def server_cpu_per_s(self) -> float:
        return self.server_cpu_s / self.wall_s


@dataclass
class FollowersResult:
    """Section 9: the rows, each repeated ``repeats`` times."""

    turns: int
    repeats: int
    samples: list[FollowerSample] = field(default_factory=list)


ROWS: tuple[tuple[int, Mode], ...] = ((0, "stream"), (1, "stream"), (10, "stream"), (10, "own"))
ROWS_100: tuple[tuple[int, Mode], ...] = ((100, "stream"), (100, "polled"))


def _spec() -> AgentSpec:
    builder = AgentBuilder("followed", registry=REGISTRY).model(MODEL).tool("lookup")
    return builder.limits(max_turns=TURNS + 5, max_steps=4 * TURNS + 10).build()


def _script(fake: FakeModel, turns: int) -> None:
    for turn in range(1, turns):
        call = Reply.tool_calls(ToolCall("lookup", {"turn": turn}))
        fake.enqueue(Reply.stall(MODEL_SECONDS, after_chunks=0, then=call))
    fake.enqueue(Reply.stall(MODEL_SECONDS, after_chunks=0, then=Reply.text("All delivered.")))


async def _streamed(psych: PsychClient, run: RunHandle, seen: list[float]) -> tuple[int, int]:
    """``PsychClient.stream``: the client's streams of one Run share one follower."""
    async for record in psych.stream(run, scope=SCOPE):
        seen.append(_latency_ms(record))
    return 0, 0  # counted by the client's FollowHub


async def _own(psych: PsychClient, run: RunHandle, seen: list[float]) -> tuple[int, int]:
    """A follower of its own, as each of many processes following the Run has."""
    follower = RecordFollower(psych.temporal, run.workflow_id)
    async for record in follower.records():
        seen.append(_latency_ms(record))
    return follower.queries, follower.retried


async def _polled(psych: PsychClient, run: RunHandle, seen: list[float]) -> tuple[int, int]:
    """The replaced follower: the records query every 250 ms until the Run settles."""
    after, queries, retried = 0, 0, 0
    while True:
        queries += 1
        try:
            page = await psych.records(run, scope=SCOPE, after=after)
        except RPCError as err:
            # The poll hit the server's buffer of queries held during a workflow task
            # ("consistent query buffer is full") or timed out under the load; the old loop
            # died of either, this one asks again so the row can be measured.
            if err.status not in (
                RPCStatusCode.RESOURCE_EXHAUSTED,
                RPCStatusCode.DEADLINE_EXCEEDED,
            ):
                raise
            retried += 1
            await asyncio.sleep(BUSY_RETRY_SECONDS * (1 + random.random()))
            continue
        for record in page.records:
            seen.append(_latency_ms(record))
            after = record.seq
        if page.settled and after >= page.last_seq:
            return queries, retried
        if after >= page.last_seq:
            await asyncio.sleep(POLL_SECONDS)


def _latency_ms(record: Record) -> float:
    return (time.time() - record.at.timestamp()) * 1000.0


async def _one(
    psych: PsychClient, fake: FakeModel, worker_pid: int, followers: int, mode: Mode, turns: int
) -> FollowerSample:
    _script(fake, turns)
    follow: Callable[[PsychClient, RunHandle, list[float]], Awaitable[tuple[int, int]]] = {
        "stream": _streamed,
        "own": _own,
        "polled": _polled,
    }[mode]
    hub_before = psych.follows.queries_made()
    worker_before, server_before = _cpu_of(worker_pid), _server_cpu(worker_pid)
    started = time.perf_counter()
    run = await psych.dispatch(_spec(), "check the orders", scope=SCOPE)
    seen: list[list[float]] = [[] for _ in range(followers)]
    counts = await asyncio.gather(*(follow(psych, run, got) for got in seen))
    await psych.result(run, scope=SCOPE)
    wall = time.perf_counter() - started
    worker_cpu, server_cpu = _cpu_of(worker_pid) - worker_before, _server_cpu(worker_pid)
    handle = psych.temporal.get_workflow_handle(run.workflow_id)
    history = await handle.fetch_history()
    info = (await handle.describe()).raw_description.workflow_execution_info
    return FollowerSample(
        followers=followers,
        mode=mode,
        wall_s=wall,
        worker_cpu_s=worker_cpu,
        server_cpu_s=server_cpu - server_before,
        history_events=len(history.events),
        history_bytes=info.history_size_bytes,
        queries=sum(q for q, _ in counts) + psych.follows.queries_made() - hub_before,
        retried=sum(r for _, r in counts),
        latencies_ms=tuple(latency for got in seen for latency in got),
    )


def _server_cpu(worker_pid: int) -> float:
    return sum(_cpu_of(pid) for pid in _children() if pid != worker_pid)


@contextlib.asynccontextmanager
async def _worker_process(
    env: WorkflowEnvironment, task_queue: str, home: Path, model_url: str
) -> AsyncIterator[int]:
    """The psych worker in a child process for the block; yields its pid."""
    target = env.client.service_client.config.target_host
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        __name__,
        "WORKER",
        target,
        task_queue,
        str(home / "blobs"),
        model_url,
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=60)
        if line.decode().strip() != READY:
            raise RuntimeError(f"the follower bench's worker did not start: it said {line!r}")
        yield proc.pid
    finally:
        if proc.returncode is None:
            os.kill(proc.pid, signal.SIGTERM)
            await proc.wait()


async def followers_cost(env: WorkflowEnvironment, home: Path, quick: bool) -> FollowersResult:
    """Measure section 9 (``quick``: one repeat of a 3-turn Run, 10 followers at most)."""
    turns = 3 if quick else TURNS
    result = FollowersResult(turns=turns, repeats=1 if quick else 3)
    task_queue = f"bench-followers-{os.getpid()}"
    async with FakeModel(models=(MODEL,), record=False) as fake:
        psych = PsychClient(
            env.client,
            store=FileVersionStore(home / "versions"),
            task_queue=task_queue,
            registry=REGISTRY,
        )
        async with _worker_process(env, task_queue, home, fake.base_url) as pid:
            await _one(psych, fake, pid, 0, "stream", turns)  # warms the worker, unmeasured
            rows = ROWS if quick else ROWS + ROWS_100
            for _ in range(result.repeats):
                for followers, mode in rows:
                    result.samples.append(await _one(psych, fake, pid, followers, mode, turns))
    return result


def _rows(result: FollowersResult) -> list[tuple[int, Mode, list[FollowerSample]]]:
    keys = list(dict.fromkeys((s.followers, s.mode) for s in result.samples))
    return [(f, m, [s for s in result.samples if (s.followers, s.mode) == (f, m)]) for f, m in keys]


def _label(followers: int, mode: Mode) -> str:
    return "none" if followers == 0 else f"{followers} {mode}"


def _spread(values: Sequence[float]) -> str:
    return f"{min(values):.3f}-{max(values):.3f}" if values else "-"


def followers_summary(result: FollowersResult) -> dict[str, object]:
    """Medians per row and the ratios to no followers."""
    base = median([s.worker_cpu_per_s for s in result.samples if s.followers == 0])
    summary: dict[str, object] = {}
    for followers, mode, samples in _rows(result):
        latencies = sorted(x for s in samples for x in s.latencies_ms)
        cpu = median([s.worker_cpu_per_s for s in samples])
        summary[_label(followers, mode)] = {
            "worker_cpu_per_s": cpu,
            "worker_cpu_ratio": cpu / base if base else float("nan"),
            "server_cpu_per_s": median([s.server_cpu_per_s for s in samples]),
            "history_events": median([s.history_events for s in samples]),
            "history_bytes": median([s.history_bytes for s in samples]),
            "queries_per_follower_s": median(
                [s.queries / s.followers / s.wall_s for s in samples if s.followers]
            ),
            "retried": median([s.retried for s in samples]),
            "latency_median_ms": median(latencies),
            "latency_p95_ms": latencies[int(0.95 * (len(latencies) - 1))] if latencies else None,
        }
    return summary


def followers_text(result: FollowersResult) -> str:
    """Section 9's table."""
    summary = followers_summary(result)
    rows = []
    for followers, mode, samples in _rows(result):
        row = summary[_label(followers, mode)]
        assert isinstance(row, dict)
        rows.append(
            (
                _label(followers, mode),
                row["worker_cpu_per_s"],
                _spread([s.worker_cpu_per_s for s in samples]),
                row["worker_cpu_ratio"],
                row["server_cpu_per_s"],
                int(row["history_events"]),
                int(row["history_bytes"]),
                row["queries_per_follower_s"],
                int(row["retried"]),
                row["latency_median_ms"],
                row["latency_p95_ms"] if row["latency_p95_ms"] is not None else float("nan"),
            )
        )
    headers = (
        "followers",
        "worker cpu s/s",
        "spread",
        "ratio",
        "server cpu s/s",
        "events",
        "history B",
        "queries/follower/s",
        "retried",
        "latency ms",
        "p95 ms",
    )
    return (
        f"9. Followers of one AgentRun ({result.turns} turns, model calls held "
        f"{MODEL_SECONDS:g} s; worker in its own process; medians of {result.repeats})\n"
        + table(headers, rows)
        + "\nratio: the worker's CPU per second against no followers, in this run. stream ="
        " PsychClient.stream (one client: its streams share one follower); own = a"
        " RecordFollower each (as separate processes); polled = the 250 ms records query"
        " stream made before."
    )


async def _worker_main(target: str, task_queue: str, blob_dir: str, model_url: str) -> None:
    client = await connect(target)
    settings = WorkerSettings(
        task_queue=task_queue,
        registry=REGISTRY,
        blobs=LocalBlobStore(blob_dir),
        endpoints=ModelEndpoints(default=Endpoint(base_url=model_url, api_key="bench")),
    )
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with run_worker(client, settings):
        print(READY, flush=True)
        await stop.wait()


if __name__ == "__main__":
    if sys.argv[1:2] != ["WORKER"] or len(sys.argv) != 6:
        raise SystemExit("usage: python -m bench._followers WORKER TARGET QUEUE BLOBS MODEL_URL")

    def _serve() -> int:
        asyncio.run(_worker_main(*sys.argv[2:6]))
        return 0

    exit_after(_serve)
