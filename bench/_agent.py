"""AgentRun and WorkflowRun under the benchmark: a worker, the fake model, a trivial code tool.

The fake model is scripted by a responder, so any number of Runs can share it: a Run's
first user message says how many turns it takes (``turns=N``); the responder answers turn
``t`` (one more than the assistant messages it was sent) with a call to the agent's one
code tool while ``t < N``, and with a text answer at ``t = N``. A Run of N turns therefore
makes N model calls and N - 1 tool calls, and resolves its catalogue in a local activity:
2N - 1 activities, one fewer than N turns of the bare loop.

A WorkflowRun of N steps calls the same code tool in each of its N tool steps (step ``i``
with ``{"turn": i}``): N tool activities and the local catalogue, no model.
"""

from __future__ import annotations

import contextlib
import re
import statistics
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from psych_runtime.activities import Endpoint, FileVersionStore, LocalBlobStore, ModelEndpoints
from psych_runtime.specs import (
    AgentBuilder,
    AgentSpec,
    Scope,
    ToolRegistry,
    Version,
    WorkflowBuilder,
    WorkflowSpec,
)
from psych_runtime.testing import FakeModel, Reply, ToolCall
from psych_runtime.workers import WorkerSettings, run_worker
from psych_runtime.workflows import PsychClient, RunStatus

MODEL = "fake-model"
_TURNS = re.compile(r"turns=(\d+)")
SCOPE = Scope(tenant="bench", principal="bench")


async def small_result(turn: int) -> str:
    """Return a short result for this turn.

    Args:
        turn: The turn number.
    """
    return f"ok {turn}"


async def result_4kb(turn: int) -> str:
    """Return a 4 KB result for this turn.

    Args:
        turn: The turn number.
    """
    stem = f"turn {turn}: "
    return stem + "x" * (4096 - len(stem))


async def small_read(turn: int) -> str:
    """Read a short value for this turn (read-only and quick: a local activity).

    Args:
        turn: The turn number.
    """
    return await small_result(turn)  # the same answer; registered as a read


async def read_4kb(turn: int) -> str:
    """Read a 4 KB value for this turn (read-only and quick: a local activity).

    Args:
        turn: The turn number.
    """
    return await result_4kb(turn)  # the same answer; registered as a read


LOCAL_SECONDS = 2.0
"""``local_seconds`` of the benchmark's read-only tools (``small_read``, ``read_4kb``)."""


def register_local_tools(registry: ToolRegistry) -> None:
    """Register the read-only tools as quick and safe to repeat: they run as local
    activities (docs/guides/tools.md, ``local_seconds``)."""
    for fn in (small_read, read_4kb):
        registry.register(fn, idempotent=True, read_only=True, local_seconds=LOCAL_SECONDS)


def responder(body: dict[str, Any]) -> Reply:
    """The fake model's script for every benchmark Run (see the module docstring)."""
    messages = body.get("messages") or []
    first_user = next((m.get("content", "") for m in messages if m.get("role") == "user"), "")
    match = _TURNS.search(first_user if isinstance(first_user, str) else "")
    turns = int(match.group(1)) if match else 1
    turn = 1 + sum(1 for m in messages if m.get("role") == "assistant")
    if turn >= turns:
        return Reply.text(f"done after {turn} turns")
    offered = [t["function"]["name"] for t in body.get("tools") or []]
    tool = next(name for name in offered if name != "read_tool_output")
    return Reply.tool_calls(ToolCall(tool, {"turn": turn}))


def agent_spec(
    registry: ToolRegistry, turns: int, *, result_4kb_tool: bool, local: bool = False
) -> AgentSpec:
    """An agent whose limits allow ``turns`` turns and whose one tool is trivial: a write
    tool (a normal activity), or with ``local`` a read-only one registered local
    (``register_local_tools``: a local activity)."""
    if local:
        tool = "read_4kb" if result_4kb_tool else "small_read"
    else:
        tool = "result_4kb" if result_4kb_tool else "small_result"
        if tool not in registry:
            registry.register(result_4kb if result_4kb_tool else small_result)
    name = "bench_4kb" if result_4kb_tool else "bench"
    return (
        AgentBuilder(f"{name}_local" if local else name, registry=registry)
        .instructions("Call the tool until told otherwise.")
        .model(MODEL)
        .tool(tool)
        .limits(
            max_turns=turns,
            max_steps=2 * turns + 2,
            # Above the 4 KB result, so results are shown inline (DESIGN.md §4).
            large_result_bytes=8192,
            # The repeat guard counts identical (arguments, result) pairs: each turn's
            # arguments differ, so it never fires; the defaults would not stop a Run either.
        )
        .build()
    )


def workflow_spec(registry: ToolRegistry, steps: int) -> WorkflowSpec:
    """A workflow of ``steps`` tool steps, each calling the trivial tool with its own turn."""
    builder = WorkflowBuilder(f"bench_steps_{steps}", registry=registry).tool(small_result)
    for step in range(1, steps + 1):
        builder.tool_step(f"step{step}", "small_result", {"turn": step})
    # Each tool step counts as a step; the default (48) would cap longer workflows.
    return builder.limits(max_steps=steps).build()


@dataclass(frozen=True)
class RunTiming:
    """One finished Run."""

    workflow_id: str
    wall_ms: float
    turns: int
    """Turns of an AgentRun, steps of a WorkflowRun."""


class AgentBench:
    """Starts AgentRuns and WorkflowRuns of a given length on one worker and times them."""

    def __init__(self, env: WorkflowEnvironment, home: Path, fake: FakeModel) -> None:
        self.registry = ToolRegistry()
        register_local_tools(self.registry)
        # As long as the baseline's (``bench-baseline-<8 hex>``): the queue's name is in
        # every activity and workflow task event, so a longer one would cost history bytes.
        self.task_queue = f"bench-agentrun-{uuid.uuid4().hex[:8]}"
        self.settings = WorkerSettings(
            task_queue=self.task_queue,
            registry=self.registry,
            blobs=LocalBlobStore(home / "blobs"),
            endpoints=ModelEndpoints(default=Endpoint(base_url=fake.base_url, api_key="bench")),
        )
        self.client = PsychClient(
            env.client,
            store=FileVersionStore(home / "versions"),
            task_queue=self.task_queue,
            registry=self.registry,
        )
        self.env = env
        self.endpoint = self.settings.endpoints.default
        """The fake model's endpoint (for ``ModelLoop``'s requests)."""
        self._fake = fake
        # Published once each: a Run dispatches its Version, as a deployed caller does (a
        # Spec dispatched is validated and published again, client work that would count
        # as the worker's here, where both share the process).
        self._specs: dict[tuple[int, bool, bool], Version] = {}
        self._workflows: dict[int, Version] = {}

    @classmethod
    @contextlib.asynccontextmanager
    async def running(cls, env: WorkflowEnvironment, home: Path) -> AsyncIterator[AgentBench]:
        """The fake model and a psych worker, for the block."""
        # It keeps no request bodies (but ``request_bodies``' own): kept, the process's
        # heap held every body of the benchmark, and each full collection walked them all.
        async with FakeModel(models=(MODEL,), record=False) as fake:
            fake.responder = responder
            bench = cls(env, home, fake)
            async with run_worker(env.client, bench.settings):
                yield bench

    def _spec(self, turns: int, result_4kb_tool: bool, local: bool) -> Version:
        key = (turns, result_4kb_tool, local)
        if key not in self._specs:
            spec = agent_spec(self.registry, turns, result_4kb_tool=result_4kb_tool, local=local)
            self._specs[key] = self.client.publish(spec)
        return self._specs[key]

    async def run(
        self, turns: int, *, result_4kb_tool: bool = False, local: bool = False
    ) -> RunTiming:
        """Run one AgentRun of ``turns`` turns to completion (``local``: its tool is the
        read-only one run as a local activity)."""
        spec = self._spec(turns, result_4kb_tool, local)
        started = time.perf_counter()
        handle = await self.client.dispatch(spec, f"Work. turns={turns}", scope=SCOPE)
        result = await self.client.result(handle, scope=SCOPE)
        wall_ms = (time.perf_counter() - started) * 1000
        if result.status is not RunStatus.COMPLETED or result.totals.turns != turns:
            raise RuntimeError(
                f"benchmark Run {handle.workflow_id} settled {result.status} after "
                f"{result.totals.turns} turns ({result.reason}); expected {turns} turns"
            )
        return RunTiming(handle.workflow_id, wall_ms, turns)

    async def request_bodies(self, turns: int) -> list[dict[str, Any]]:
        """Run one AgentRun of ``turns`` turns; the request bodies its model activity sent
        the fake model, turn 1 first (what ``ModelLoop`` sends, ``_model_request.py``).
        Nothing else may call the fake model meanwhile."""
        with self._fake.recorded() as bodies:
            await self.run(turns)
        if len(bodies) != turns:
            raise RuntimeError(f"a {turns}-turn AgentRun made {len(bodies)} model requests")
        return bodies

    async def workflow(self, steps: int) -> RunTiming:
        """Run one WorkflowRun of ``steps`` tool steps to completion (``turns`` = steps)."""
        if steps not in self._workflows:
            self._workflows[steps] = self.client.publish(workflow_spec(self.registry, steps))
        started = time.perf_counter()
        handle = await self.client.dispatch(self._workflows[steps], "Work.", scope=SCOPE)
        result = await self.client.result(handle, scope=SCOPE)
        wall_ms = (time.perf_counter() - started) * 1000
        done = len(result.outputs or {})
        if result.status is not RunStatus.COMPLETED or done != steps:
            raise RuntimeError(
                f"benchmark workflow {handle.workflow_id} settled {result.status} with "
                f"{done} step outputs ({result.reason}); expected {steps}"
            )
        return RunTiming(handle.workflow_id, wall_ms, steps)

    async def activity_bodies_ms(self, workflow_id: str) -> dict[str, float]:
        """Median time inside the model and tool activities, as they measured it themselves.

        From the Run's report (each activity returns a ``Latency``): the work of the
        activity body alone, without the SDK, the payload conversion and the RPCs that the
        history timestamps also include.
        """
        report = await self.client.report(workflow_id, scope=SCOPE)
        model = [c.latency.duration_ms for c in report.model_calls if c.latency]
        tool = [c.latency.duration_ms for c in report.tool_calls if c.latency]
        return {
            "model": statistics.median(model) if model else float("nan"),
            "tool": statistics.median(tool) if tool else float("nan"),
        }

    def handle(self, workflow_id: str) -> WorkflowHandle[Any, Any]:
        """The Temporal handle of a Run."""
        return self.env.client.get_workflow_handle(workflow_id)
