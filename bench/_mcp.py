"""Section 6: an AgentRun calling an MCP tool against the same Run calling a code tool.

Both agents run N turns on one worker and one fake model: turns 1..N-1 call one trivial
tool, turn N answers. The code agent's tool is ``small_result`` (a registered async
function); the MCP agent's is ``tools__echo`` of a 40-tool catalogue (``tests.mcp.server``
with 29 filler tools, started on loopback in its own process, ``preload: true`` so the
whole catalogue is offered). The MCP Run also asks ``psych.mcp.list_tools`` at every turn
boundary (a local activity: a marker in history, the catalogue's hash when unchanged), so
the ratios are what MCP costs a turn over a code tool: time, and history bytes.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.testing import WorkflowEnvironment

from bench._agent import MODEL, SCOPE, small_result
from bench._history import history_facts
from bench._table import table
from psych_runtime.activities import Endpoint, FileVersionStore, LocalBlobStore, ModelEndpoints
from psych_runtime.activities.contract import MODEL_CALL
from psych_runtime.activities.egress import LOOPBACK, EgressSettings
from psych_runtime.specs import AgentBuilder, AgentSpec, ToolRegistry
from psych_runtime.testing import FakeModel, Reply, ToolCall
from psych_runtime.workers import WorkerSettings, run_worker
from psych_runtime.workflows import PsychClient, RunStatus
from tests.mcp.fixture import McpTestServer, start_mcp_server

MCP_TOOL = "tools__echo"
FILLER = 29
"""With the server's 11 own tools: a 40-tool catalogue."""
MODEL_ACTIVITY = MODEL_CALL


def responder(body: dict[str, Any]) -> Reply:
    """Call the Run's one tool (the MCP echo when offered) until the turn the input names."""
    messages = body.get("messages") or []
    first = next((m.get("content", "") for m in messages if m.get("role") == "user"), "")
    turns = int(str(first).rsplit("turns=", 1)[-1])
    turn = 1 + sum(1 for m in messages if m.get("role") == "assistant")
    if turn >= turns:
        return Reply.text(f"done after {turn} turns")
    offered = {t["function"]["name"] for t in body.get("tools") or []}
    if MCP_TOOL in offered:
        return Reply.tool_calls(ToolCall(MCP_TOOL, {"text": f"ok {turn}"}))
    return Reply.tool_calls(ToolCall("small_result", {"turn": turn}))


@dataclass(frozen=True)
class McpSample:
    """One Run, per turn."""

    wall_ms_per_turn: float
    steady_ms_per_turn: float | None
    history_bytes_per_turn: float
    events_per_turn: float
    tool_body_ms: float | None


@dataclass
class McpResult:
    """Section 6: Runs with a code tool (the baseline) and with an MCP tool, alternately."""

    turns: int
    tools_offered: int = 0
    code: list[McpSample] = field(default_factory=list)
    mcp: list[McpSample] = field(default_factory=list)


class McpBench:
    """A worker, the fake model and the MCP test server, for section 6."""

    def __init__(
        self, env: WorkflowEnvironment, home: Path, fake: FakeModel, server: McpTestServer
    ) -> None:
        self.registry = ToolRegistry()
        self.task_queue = f"bench-mcp-{time.monotonic_ns()}"
        self.settings = WorkerSettings(
            task_queue=self.task_queue,
            registry=self.registry,
            blobs=LocalBlobStore(home / "mcp-blobs"),
            endpoints=ModelEndpoints(default=Endpoint(base_url=fake.base_url, api_key="bench")),
            # The benchmark's MCP server is on loopback, which a Spec may reach only when
            # the operator allows it.
            egress=EgressSettings().allowing(*LOOPBACK),
        )
        self.client = PsychClient(
            env.client,
            store=FileVersionStore(home / "mcp-versions"),
            task_queue=self.task_queue,
            registry=self.registry,
        )
        self.env = env
        self.fake = fake
        self.server = server

    @classmethod
    @contextlib.asynccontextmanager
    async def running(cls, env: WorkflowEnvironment, home: Path) -> AsyncIterator[McpBench]:
        """The MCP server, the fake model and a psych worker, for the block."""
        server = start_mcp_server("streamable-http", filler=FILLER)
        try:
            async with FakeModel(models=(MODEL,), record=False) as fake:
                fake.responder = responder
                bench = cls(env, home, fake, server)
                async with run_worker(env.client, bench.settings):
                    yield bench
        finally:
            server.stop()

    def spec(self, turns: int, *, mcp: bool) -> AgentSpec:
        builder = (
            AgentBuilder("bench_mcp" if mcp else "bench_code", registry=self.registry)
            .instructions("Call the tool until told otherwise.")
            .model(MODEL)
            .limits(max_turns=turns, max_steps=2 * turns + 2)
        )
        if mcp:
            builder.mcp_server("tools", self.server.url, preload=True)
        else:
            builder.tool(small_result)
        return builder.build()

    async def sample(self, spec: AgentSpec, turns: int) -> McpSample:
        started = time.perf_counter()
        handle = await self.client.dispatch(spec, f"Work. turns={turns}", scope=SCOPE)
        result = await self.client.result(handle, scope=SCOPE)
        wall_ms = (time.perf_counter() - started) * 1000
        if result.status is not RunStatus.COMPLETED or result.totals.turns != turns:
            raise RuntimeError(
                f"benchmark Run {handle.workflow_id} settled {result.status} after "
                f"{result.totals.turns} turns ({result.reason}); expected {turns}"
            )
        facts = await history_facts(
            self.env.client.get_workflow_handle(handle.workflow_id), MODEL_ACTIVITY
        )
        report = await self.client.report(handle, scope=SCOPE)
        bodies = [c.latency.duration_ms for c in report.tool_calls if c.latency]
        return McpSample(
            wall_ms_per_turn=wall_ms / turns,
            steady_ms_per_turn=facts.turn_ms,
            history_bytes_per_turn=facts.server_bytes / turns,
            events_per_turn=facts.events / turns,
            tool_body_ms=statistics.median(bodies) if bodies else None,
        )


async def mcp_calls(env: WorkflowEnvironment, home: Path, turns: int, runs: int) -> McpResult:
    """Alternate Runs with a code tool and with an MCP tool, after one warm-up Run each."""
    result = McpResult(turns=turns)
    async with McpBench.running(env, home) as bench:
        code, mcp = bench.spec(turns, mcp=False), bench.spec(turns, mcp=True)
        await bench.sample(code, turns)
        with bench.fake.recorded() as bodies:
            await bench.sample(mcp, turns)
        first = bodies[-1]
        result.tools_offered = sum(
            1 for t in first.get("tools") or [] if t["function"]["name"].startswith("tools__")
        )
        for _ in range(runs):
            result.code.append(await bench.sample(code, turns))
            result.mcp.append(await bench.sample(mcp, turns))
    return result


def _median(values: list[float | None]) -> float:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else float("nan")


def _medians(samples: list[McpSample]) -> dict[str, float]:
    return {
        "ms_per_turn": _median([s.wall_ms_per_turn for s in samples]),
        "steady_ms_per_turn": _median([s.steady_ms_per_turn for s in samples]),
        "history_bytes_per_turn": _median([s.history_bytes_per_turn for s in samples]),
        "events_per_turn": _median([s.events_per_turn for s in samples]),
        "tool_body_ms": _median([s.tool_body_ms for s in samples]),
    }


def mcp_summary(result: McpResult) -> dict[str, Any]:
    """Medians and ratios of section 6 (MCP over code tool)."""
    code, mcp = _medians(result.code), _medians(result.mcp)
    return {
        "tools_offered": result.tools_offered,
        "code": code,
        "mcp": mcp,
        "ratio": mcp["ms_per_turn"] / code["ms_per_turn"],
        "steady_ratio": mcp["steady_ms_per_turn"] / code["steady_ms_per_turn"],
        "history_ratio": mcp["history_bytes_per_turn"] / code["history_bytes_per_turn"],
        "overhead_ms_per_turn": mcp["steady_ms_per_turn"] - code["steady_ms_per_turn"],
    }


def mcp_text(result: McpResult) -> str:
    """Section 6 as printed."""
    s = mcp_summary(result)
    code, mcp = s["code"], s["mcp"]
    head = (
        f"6. AgentRun with an MCP tool ({s['tools_offered']}-tool catalogue, streamable HTTP) "
        f"against the same Run with a code tool ({result.turns} turns, median of "
        f"{len(result.mcp)} Runs each, after one warm-up Run)"
    )
    rows = [
        [
            "code tool (baseline)",
            code["ms_per_turn"],
            1.0,
            code["steady_ms_per_turn"],
            1.0,
            code["history_bytes_per_turn"],
            1.0,
            code["events_per_turn"],
            code["tool_body_ms"],
        ],
        [
            "MCP tool",
            mcp["ms_per_turn"],
            s["ratio"],
            mcp["steady_ms_per_turn"],
            s["steady_ratio"],
            mcp["history_bytes_per_turn"],
            s["history_ratio"],
            mcp["events_per_turn"],
            mcp["tool_body_ms"],
        ],
    ]
    body = table(
        [
            "",
            "ms/turn (wall)",
            "ratio",
            "ms/turn (steady)",
            "ratio",
            "history bytes/turn",
            "ratio",
            "events/turn",
            "tool body ms",
        ],
        rows,
    )
    tail = f"MCP turn overhead (steady): {s['overhead_ms_per_turn']:+.1f} ms/turn"
    return f"{head}\n{body}\n{tail}"
