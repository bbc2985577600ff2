"""Section 10: live deltas. One command, under a minute: ``python -m bench._deltas``.

(1) Added latency of a delta from the provider to a follower in another process. A paced
provider (``_Provider``: an OpenAI-style SSE stream, one text chunk every ``PACE_SECONDS``,
each chunk's send time noted) serves the worker's model call; in the same run a second
process reads an identical stream from the same provider directly (the baseline: what
reading the provider costs anyway), and a third follows the Run with
``PsychClient.stream(..., deltas=True)``. Both print their receive time per piece (the
system-wide monotonic clock, comparable across processes); latency = received - sent.
(2) A Run's per-turn time with 10 followers streaming deltas (10 clients, so 10 describe
loops and 10 relay connections, in one other process, as followers are: a browser's API
server, another service) against none, and against 10 following records only, alternating,
in the same run.

Writes ``bench/results/deltas-<UTC timestamp>.json`` and prints the medians, p95s and ratios.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench._deltas_heartbeat import heartbeat_channel
from bench._process import dev_server, exit_after, run_until_terminated
from psych_runtime.activities import Endpoint, FileVersionStore, LocalBlobStore, ModelEndpoints
from psych_runtime.specs import AgentBuilder, Scope, ToolRegistry
from psych_runtime.workers import WorkerSettings, connect, run_worker
from psych_runtime.workflows import PsychClient, TokenDelta

SCOPE = Scope(tenant="bench", principal="bench")
PIECES = 60
PACE_SECONDS = 0.02
TURNS = 5
TURN_PIECES = 10
RUNS = 4
FOLLOWERS = 10
REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results"
REGISTRY = ToolRegistry()


@REGISTRY.register
def noop() -> str:
    """Do nothing."""
    return "ok"


class _Provider:
    """A paced chat-completions stream on loopback that notes when it sent each piece."""

    def __init__(self, pieces: int) -> None:
        self.pieces = pieces
        self.sent: dict[int, list[float]] = {}
        """Per request, in arrival order: the send time of piece n at index n - 1."""
        self.direct: set[int] = set()
        """The requests of the direct reader (the worker's ask for usage: the others)."""
        self._requests = 0
        self._server: asyncio.Server | None = None
        self.url = ""

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/v1"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        body = json.loads(await reader.readexactly(length))
        number = self._requests
        self._requests += 1
        sent = self.sent[number] = []
        if "stream_options" not in body:
            self.direct.add(number)
        tools_done = sum(m.get("role") == "tool" for m in body.get("messages", []))
        # The per-turn agent has the `noop` tool (every agent has `read_tool_output`).
        agent = any(t["function"]["name"] == "noop" for t in body.get("tools", []))
        tool_turn = agent and tools_done < TURNS - 1
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
        )
        pieces = TURN_PIECES if agent else self.pieces
        for n in range(1, pieces + 1):
            await asyncio.sleep(PACE_SECONDS)
            if tool_turn and n == pieces:
                call = {
                    "index": 0,
                    "id": f"c{number}",
                    "function": {"name": "noop", "arguments": "{}"},
                }
                delta: dict[str, Any] = {"tool_calls": [call]}
            else:
                delta = {"content": f"<{n}>"}
            writer.write(_event({"choices": [{"index": 0, "delta": delta}]}))
            await writer.drain()
            sent.append(time.monotonic())
        finish = "tool_calls" if tool_turn else "stop"
        usage = {"prompt_tokens": 10, "completion_tokens": pieces}
        writer.write(_event({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}))
        writer.write(_event({"choices": [], "usage": usage}) + b"data: [DONE]\n\n")
        await writer.drain()
        writer.close()


def _event(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data).encode() + b"\n\n"


# --- the two other processes --------------------------------------------------------------


async def _direct(url: str) -> None:
    """Read one stream straight from the provider; print ``n time`` per piece."""
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True}
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    n = 0
    async with (
        httpx.AsyncClient(timeout=30) as http,
        http.stream("POST", url + "/chat/completions", json=body) as response,
    ):
        async for line in response.aiter_lines():
            if line.startswith("data:") and '"content"' in line:
                n += 1
                print(n, time.monotonic(), flush=True)


async def _follow(target: str, queue: str) -> None:
    """Follow one Run with deltas; print ``n time`` per piece."""
    client = PsychClient(
        await connect(target, codec=None),
        store=FileVersionStore(Path(tempfile.mkdtemp())),
        task_queue=queue,
    )
    print("ready", flush=True)
    workflow_id = (await asyncio.to_thread(sys.stdin.readline)).strip()
    async for item in client.stream(workflow_id, scope=SCOPE, deltas=True):
        if isinstance(item, TokenDelta):
            print(item.n, time.monotonic(), flush=True)


async def _spawn(*args: str) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench._deltas",
        *args,
        cwd=REPO,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert (await asyncio.wait_for(proc.stdout.readline(), 60)).strip() == b"ready"
    return proc


async def _go(proc: asyncio.subprocess.Process, line: str) -> list[float]:
    """Send ``line``, read ``n time`` lines to the end: the receive times by piece."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(line.encode() + b"\n")
    await proc.stdin.drain()
    out = await asyncio.wait_for(proc.stdout.read(), 120)
    await proc.wait()
    return [float(row.split()[1]) for row in out.decode().splitlines()]


# --- the measurement ----------------------------------------------------------------------


@asynccontextmanager
async def _rig(home: Path) -> AsyncIterator[tuple[Any, PsychClient, _Provider]]:
    provider = _Provider(PIECES)
    await provider.start()
    try:
        async with dev_server(fast_dispatch=True) as env:
            queue = "bench-deltas"
            settings = WorkerSettings(
                task_queue=queue,
                registry=REGISTRY,
                blobs=LocalBlobStore(home / "blobs"),
                endpoints=ModelEndpoints(default=Endpoint(base_url=provider.url)),
            )
            client = PsychClient(
                env.client, store=FileVersionStore(home / "v"), task_queue=queue, registry=REGISTRY
            )
            async with run_worker(env.client, settings):
                yield env, client, provider
    finally:
        await provider.stop()


def _stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "median_ms": statistics.median(ordered) * 1000,
        "p95_ms": ordered[max(0, round(0.95 * len(ordered)) - 1)] * 1000,
        "n": len(ordered),
    }


async def _latency(env: Any, client: PsychClient, provider: _Provider) -> dict[str, Any]:
    target = env.client.service_client.config.target_host
    talker = AgentBuilder("talker").model("m").build()
    follower = await _spawn("follow", target, client.task_queue)
    direct = await _spawn("direct", provider.url)
    before = set(provider.sent)
    run = await client.dispatch(talker, "talk", scope=SCOPE)
    followed, read = await asyncio.gather(_go(follower, run.workflow_id), _go(direct, "go"))
    await client.result(run, scope=SCOPE)
    (run_call,) = set(provider.sent) - before - provider.direct
    (direct_call,) = (set(provider.sent) - before) & provider.direct
    assert len(followed) == PIECES and len(read) == PIECES, (len(followed), len(read))
    follow = [got - sent for got, sent in zip(followed, provider.sent[run_call], strict=True)]
    base = [got - sent for got, sent in zip(read, provider.sent[direct_call], strict=True)]
    # Pieces sent before the follower had found the attempt's relay arrive in one burst
    # when it connects: that is discovery. The others show the relay path itself.
    joined = followed[0]
    live = [lag for lag, sent in zip(follow, provider.sent[run_call], strict=True) if sent > joined]
    f, b, lv = _stats(follow), _stats(base), _stats(live)
    return {
        "follower": f,
        "direct": b,
        "follower_live": lv,
        "first_piece_ms": follow[0] * 1000,
        "added_median_ms": f["median_ms"] - b["median_ms"],
        "added_p95_ms": f["p95_ms"] - b["p95_ms"],
        "added_live_median_ms": lv["median_ms"] - b["median_ms"],
        "added_live_p95_ms": lv["p95_ms"] - b["p95_ms"],
    }


async def _per_turn(env: Any, client: PsychClient) -> dict[str, Any]:
    agent = AgentBuilder("worker", registry=REGISTRY).model("m").tool("noop").build()
    samples: dict[str, list[float]] = {"none": [], "records": [], "followed": [], "shared": []}
    target = env.client.service_client.config.target_host
    procs = {
        kind: await _spawn("followers", target, client.task_queue, str(FOLLOWERS), kind)
        for kind in ("records", "followed", "shared")
    }
    try:
        await _one_run(client, agent, None)  # warm-up
        for _ in range(RUNS):
            for kind in samples:
                took = await _one_run(client, agent, procs.get(kind))
                samples[kind].append(took / TURNS)
    finally:
        for proc in procs.values():
            assert proc.stdin is not None
            proc.stdin.close()
            await proc.wait()
    none, records, followed, shared = (statistics.median(samples[k]) for k in samples)
    return {
        "samples_ms_per_turn": {k: [v * 1000 for v in vs] for k, vs in samples.items()},
        "none_ms_per_turn": none * 1000,
        "records_ms_per_turn": records * 1000,
        "followed_ms_per_turn": followed * 1000,
        "shared_ms_per_turn": shared * 1000,
        "ratio": followed / none,
        "ratio_to_records": followed / records,
        "ratio_shared": shared / none,
    }


async def _one_run(
    client: PsychClient, agent: Any, followers: asyncio.subprocess.Process | None
) -> float:
    """One Run's time from dispatch to result, followed by ``followers`` (a ``followers``
    process) from its start; waits until they have read it to its end."""
    started = time.monotonic()
    run = await client.dispatch(agent, "go", scope=SCOPE)
    if followers is not None:
        assert followers.stdin is not None
        followers.stdin.write(run.workflow_id.encode() + b"\n")
        await followers.stdin.drain()
    await client.result(run, scope=SCOPE)
    took = time.monotonic() - started
    if followers is not None:
        assert followers.stdout is not None
        done = await asyncio.wait_for(followers.stdout.readline(), 60)
        assert done.startswith(b"done"), done
    return took


async def _followers(target: str, queue: str, count: int, kind: str) -> None:
    """``count`` streams, each following every Run named on stdin to its end (with deltas
    unless ``kind`` is ``records``): through a client each, or all through one (``shared``:
    as an API server's followers of one Run are); prints ``done <pieces>`` per Run."""
    store = FileVersionStore(Path(tempfile.mkdtemp()))
    temporal = await connect(target, codec=None)
    clients = [PsychClient(temporal, store=store, task_queue=queue) for _ in range(count)]
    if kind == "shared":
        clients = clients[:1] * count

    async def drain(follower: PsychClient, workflow_id: str) -> int:
        pieces = 0
        async for item in follower.stream(workflow_id, scope=SCOPE, deltas=kind != "records"):
            pieces += isinstance(item, TokenDelta)
        return pieces

    print("ready", flush=True)
    while workflow_id := (await asyncio.to_thread(sys.stdin.readline)).strip():
        counts = await asyncio.gather(*(drain(c, workflow_id) for c in clients))
        print("done", sum(counts), flush=True)


async def main() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="psych-bench-deltas-") as home:
        async with _rig(Path(home)) as (env, client, provider):
            latency = await _latency(env, client, provider)
            turns = await _per_turn(env, client)
            heartbeat = await heartbeat_channel(env.client)
    return {"latency": latency, "per_turn": turns, "heartbeat_channel": heartbeat}


def _report(results: dict[str, Any]) -> str:
    lat, turn, beat = results["latency"], results["per_turn"], results["heartbeat_channel"]
    f, d = lat["follower"], lat["direct"]
    return "\n".join(
        [
            f"10. Live deltas ({PIECES} pieces every {PACE_SECONDS * 1000:.0f} ms; "
            f"{TURNS}-turn Runs, {RUNS} of each)",
            f"  provider -> follower (another process): median {f['median_ms']:.1f} ms, "
            f"p95 {f['p95_ms']:.1f} ms",
            f"  provider -> direct reader (baseline):   median {d['median_ms']:.1f} ms, "
            f"p95 {d['p95_ms']:.1f} ms",
            f"  added: median {lat['added_median_ms']:.1f} ms, p95 {lat['added_p95_ms']:.1f} ms "
            "(target median <= 50 ms)",
            f"  added once connected: median {lat['added_live_median_ms']:.1f} ms, "
            f"p95 {lat['added_live_p95_ms']:.1f} ms; first piece {lat['first_piece_ms']:.0f} ms "
            "after it was sent (finding the relay)",
            f"  per turn: none {turn['none_ms_per_turn']:.1f} ms; {FOLLOWERS} followers of "
            f"records only {turn['records_ms_per_turn']:.1f} ms; with deltas "
            f"{turn['followed_ms_per_turn']:.1f} ms",
            f"  ratio deltas / none {turn['ratio']:.3f} (target <= 1.05); deltas / records "
            f"only {turn['ratio_to_records']:.3f}",
            f"  {FOLLOWERS} followers with deltas through one client (an API server's): "
            f"{turn['shared_ms_per_turn']:.1f} ms, ratio / none {turn['ratio_shared']:.3f}",
            f"  heartbeat details instead (throttle {beat['throttle_s']:.0f} s, describe every "
            f"20 ms): first beat visible after {beat['first_beat_visible_ms']:.0f} ms; "
            f"{beat['pieces_seen_while_running']} of {beat['pieces']} pieces seen while the "
            f"call ran, median lag {statistics.median(beat['lag_ms']):.0f} ms",
        ]
    )


def _cli() -> int:
    if sys.argv[1:2] == ["direct"]:
        asyncio.run(_direct(sys.argv[2]))
    elif sys.argv[1:2] == ["follow"]:
        asyncio.run(_follow(sys.argv[2], sys.argv[3]))
    elif sys.argv[1:2] == ["followers"]:
        asyncio.run(_followers(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]))
    else:
        results = run_until_terminated(main())
        print(_report(results))
        RESULTS.mkdir(exist_ok=True)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        path = RESULTS / f"deltas-{stamp}.json"
        path.write_text(json.dumps(results, indent=2))
        print(f"  written to {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    exit_after(_cli)
