"""The five measurements. Each returns raw samples; ``_report`` derives medians and ratios."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from temporalio.testing import WorkflowEnvironment

from bench._agent import AgentBench
from bench._baseline import BaselineBench
from bench._history import HistoryFacts, history_facts
from bench._process import captured_output, cpu_mark
from bench._threads import ThreadMark, watch_collector
from bench._workflows import MODEL_ACTIVITY, MODEL_REQUEST_ACTIVITY, RESULT_TOOL_ACTIVITY
from psych_runtime.activities.contract import MODEL_CALL, TOOL_RUN_CODE

AGENT_MODEL_ACTIVITY = MODEL_CALL
AGENT_TOOL_ACTIVITY = TOOL_RUN_CODE
RESULT_BYTES = 4096
PAYLOAD_WARNING = "TMPRL1103"


@dataclass(frozen=True)
class Settings:
    """How much the benchmark does (the default keeps ``make bench`` near 3 minutes)."""

    sequential_turns: int = 20
    sequential_runs: int = 5
    concurrent_runs: int = 50
    concurrent_turns: int = 10
    concurrent_repeats: int = 5
    history_turns: tuple[int, ...] = (10, 50, 200)
    conversation_turns: tuple[int, ...] = (10, 50, 200)
    conversation_timeout_s: float = 150.0
    dispatch_turns: int = 20
    dispatch_later_runs: int = 5
    dispatch_idle_s: float = 2.5
    workflow_steps: int = 10
    workflow_runs: int = 9
    """Section 5's Runs last ~0.3 s each, so more of them cost little and steady the median."""
    mcp_turns: int = 20
    mcp_runs: int = 5


QUICK = Settings(
    sequential_turns=10,
    sequential_runs=2,
    concurrent_runs=10,
    concurrent_turns=5,
    concurrent_repeats=1,
    history_turns=(10, 50),
    conversation_turns=(10, 50),
    dispatch_turns=10,
    dispatch_later_runs=2,
    dispatch_idle_s=1.5,
    workflow_steps=5,
    workflow_runs=2,
    mcp_turns=5,
    mcp_runs=1,
)
"""``python -m bench --quick``: a smoke check of the benchmark code, not a measurement."""


# --- 1. sequential per-turn time ------------------------------------------------------------


@dataclass(frozen=True)
class RunSample:
    """One sequential Run, per turn."""

    wall_ms_per_turn: float
    """Client-side time from start to result, divided by the turns."""
    steady_ms_per_turn: float | None
    """Median interval between consecutive model-activity schedulings (from history)."""
    phases_ms_per_turn: dict[str, float]
    """Where the time went, from history event timestamps (see ``_history``)."""
    activity_bodies_ms: dict[str, float] = field(default_factory=dict)
    """AgentRun only: median ms inside the model and tool activity bodies."""


@dataclass(frozen=True)
class SequentialResult:
    """Section 1: AgentRun against the bare loop, one Run at a time."""

    turns: int
    bare: list[RunSample] = field(default_factory=list)
    agent: list[RunSample] = field(default_factory=list)
    model_floor: list[RunSample] = field(default_factory=list)
    """``ModelLoop``: the bare loop whose model activity makes the model request."""


def _sample(
    wall_ms: float, turns: int, facts: HistoryFacts, bodies: dict[str, float] | None = None
) -> RunSample:
    return RunSample(
        wall_ms_per_turn=wall_ms / turns,
        steady_ms_per_turn=facts.turn_ms,
        phases_ms_per_turn={k: v / turns for k, v in facts.breakdown_ms.items()},
        activity_bodies_ms=bodies or {},
    )


async def sequential(
    agent: AgentBench, bare: BaselineBench, model: BaselineBench, settings: Settings
) -> SequentialResult:
    """Alternate bare, model-request (on ``model``, unsandboxed as AgentRun runs) and
    AgentRun Runs, so drift on a noisy machine hits all alike."""
    turns = settings.sequential_turns
    result = SequentialResult(turns=turns)
    # One unmeasured Run of each warms the workers (first sandbox import, connections);
    # AgentRun's gives ModelLoop the requests to send.
    model.learn(turns, await agent.request_bodies(turns))
    await bare.bare(turns)
    await model.model_loop(turns)
    for _ in range(settings.sequential_runs):
        run = await bare.bare(turns)
        facts = await history_facts(bare.handle(run.workflow_id), MODEL_ACTIVITY)
        result.bare.append(_sample(run.wall_ms, turns, facts))
        run = await model.model_loop(turns)
        facts = await history_facts(model.handle(run.workflow_id), MODEL_REQUEST_ACTIVITY)
        result.model_floor.append(_sample(run.wall_ms, turns, facts))
        timing = await agent.run(turns)
        facts = await history_facts(agent.handle(timing.workflow_id), AGENT_MODEL_ACTIVITY)
        bodies = await agent.activity_bodies_ms(timing.workflow_id)
        result.agent.append(_sample(timing.wall_ms, turns, facts, bodies))
    return result


# --- 2. throughput ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    """One batch of concurrent Runs."""

    turns_per_s: float
    process_cpu_ms_per_turn: float
    """CPU of this process (worker, fake model, client) per turn taken."""
    server_cpu_ms_per_turn: float
    """CPU of the dev server process per turn taken."""
    threads_ms_per_turn: dict[str, float] = field(default_factory=dict)
    """This process's CPU per turn by thread group, and the collector's pauses
    (``bench._threads``)."""


@dataclass(frozen=True)
class ThroughputResult:
    """Section 2: turns per second with many Runs at once."""

    runs: int
    turns: int
    bare: list[Batch] = field(default_factory=list)
    agent: list[Batch] = field(default_factory=list)
    model_floor: list[Batch] = field(default_factory=list)
    """``ModelLoop`` batches: the bare loop whose model activity makes the model request."""
    bare_unsandboxed: list[Batch] = field(default_factory=list)
    """The bare loop on a worker without the workflow sandbox, as psych's workers run."""


async def _batch(runs: int, turns: int, start: Callable[[], Awaitable[object]]) -> Batch:
    watch_collector()
    before, threads = cpu_mark(), ThreadMark.now()
    started = time.perf_counter()
    await asyncio.gather(*(start() for _ in range(runs)))
    elapsed = time.perf_counter() - started
    after, threads_after = cpu_mark(), ThreadMark.now()
    taken = runs * turns
    return Batch(
        turns_per_s=taken / elapsed,
        process_cpu_ms_per_turn=(after.process_s - before.process_s) * 1000 / taken,
        server_cpu_ms_per_turn=(after.server_s - before.server_s) * 1000 / taken,
        threads_ms_per_turn=threads.ms_per_turn(threads_after, taken),
    )


async def bare_throughput(bare: BaselineBench, runs: int, turns: int) -> Batch:
    """``runs`` concurrent bare loops."""
    return await _batch(runs, turns, lambda: bare.bare(turns))


async def agent_throughput(agent: AgentBench, runs: int, turns: int) -> Batch:
    """``runs`` concurrent AgentRuns."""
    return await _batch(runs, turns, lambda: agent.run(turns))


async def throughput(
    agent: AgentBench, bare: BaselineBench, unsandboxed: BaselineBench, settings: Settings
) -> ThroughputResult:
    """Alternate bare (sandboxed, then not), model-request and AgentRun batches; the
    model-request loops run on ``unsandboxed``, as AgentRun runs."""
    runs, turns = settings.concurrent_runs, settings.concurrent_turns
    result = ThroughputResult(runs=runs, turns=turns)
    unsandboxed.learn(turns, await agent.request_bodies(turns))
    for _ in range(settings.concurrent_repeats):
        result.bare.append(await bare_throughput(bare, runs, turns))
        result.bare_unsandboxed.append(await bare_throughput(unsandboxed, runs, turns))
        result.model_floor.append(await _batch(runs, turns, lambda: unsandboxed.model_loop(turns)))
        result.agent.append(await agent_throughput(agent, runs, turns))
    return result


# --- 3. history growth -----------------------------------------------------------------------


@dataclass(frozen=True)
class HistorySample:
    """The history of one Run with a 4 KB tool result per turn."""

    turns: int
    """Turns asked for."""
    turns_done: int
    """Turns whose tool call completed (fewer when the server stopped the workflow)."""
    server_bytes: int
    event_bytes: int
    events: int
    closed_by: str
    failure: str | None = None


@dataclass(frozen=True)
class HistoryResult:
    """Section 3: history bytes against turns."""

    result_bytes: int
    agent: list[HistorySample] = field(default_factory=list)
    conversation: list[HistorySample] = field(default_factory=list)
    floor: list[HistorySample] = field(default_factory=list)
    """ResultLoop of each AgentRun length: the hand-written loop doing the same Temporal work
    (a trivial model activity, a tool activity returning the same 4 KB), the bytes floor."""
    payload_warnings: dict[int, int] = field(default_factory=dict)
    """By-value Run length -> SDK warnings of a payload over 512 KB (TMPRL1103)."""


def _reemit(text: str, skip: tuple[str, ...]) -> None:
    for line in text.splitlines():
        if not any(s in line for s in skip):
            print(line, file=sys.stderr)


def _history_sample(
    turns: int, done: int, facts: HistoryFacts, failure: str | None = None
) -> HistorySample:
    return HistorySample(
        turns=turns,
        turns_done=done,
        server_bytes=facts.server_bytes,
        event_bytes=facts.event_bytes,
        events=facts.events,
        closed_by=facts.closed_by,
        failure=failure,
    )


async def history(agent: AgentBench, bare: BaselineBench, settings: Settings) -> HistoryResult:
    """AgentRun (conversation by reference) against ResultLoop (the floor) and
    ConversationLoop (by value)."""
    result = HistoryResult(result_bytes=RESULT_BYTES)
    for turns in settings.history_turns:
        floor = await bare.results(turns, RESULT_BYTES)
        facts = await history_facts(bare.handle(floor.workflow_id), MODEL_ACTIVITY)
        done = facts.completed.get(RESULT_TOOL_ACTIVITY, 0)
        result.floor.append(_history_sample(turns, done, facts))
        timing = await agent.run(turns, result_4kb_tool=True)
        facts = await history_facts(agent.handle(timing.workflow_id), AGENT_MODEL_ACTIVITY)
        result.agent.append(_history_sample(turns, turns, facts))
    for turns in settings.conversation_turns:
        # The SDK core logs a warning per payload over 512 KB and the server's refusal at
        # 50 MB straight to the process's output: counted here instead of flooding it.
        with captured_output() as log:
            run = await bare.conversation(turns, RESULT_BYTES, settings.conversation_timeout_s)
        result.payload_warnings[turns] = log.count(PAYLOAD_WARNING)
        _reemit(log.text, skip=(PAYLOAD_WARNING, "history size exceeds limit"))
        facts = await history_facts(bare.handle(run.workflow_id), MODEL_ACTIVITY)
        done = facts.completed.get(RESULT_TOOL_ACTIVITY, 0)
        result.conversation.append(_history_sample(turns, done, facts, run.failure))
        if run.failure:
            break  # a longer Run would only fail the same way
    return result


# --- 4. dispatch latency ---------------------------------------------------------------------


@dataclass(frozen=True)
class DispatchResult:
    """Section 4: the bare one-activity loop on one freshly started dev server (ms/turn)."""

    fast_dispatch: bool
    turns: int
    first_run: float
    later_runs: list[float]
    after_idle: float
    """A Run after the server sat idle for ``Settings.dispatch_idle_s``."""
    two_activities: list[float]
    """The two-activity bare loop (section 1's floor), Runs back to back."""
    eager_off: list[float]
    """One activity per turn with the worker's eager activity dispatch turned off."""
    concurrent: Batch
    """Bare two-activity loop, ``Settings.concurrent_runs`` at once."""


async def dispatch(env: WorkflowEnvironment, fast: bool, settings: Settings) -> DispatchResult:
    """Measure on ``env``, which must be fresh: its first Run is the "first run"."""
    turns = settings.dispatch_turns

    def per_turn(wall_ms: float) -> float:
        return wall_ms / turns

    async with BaselineBench.running(env) as bare:
        first = per_turn((await bare.bare(turns, tool=False)).wall_ms)
        later = [
            per_turn((await bare.bare(turns, tool=False)).wall_ms)
            for _ in range(settings.dispatch_later_runs)
        ]
        await asyncio.sleep(settings.dispatch_idle_s)
        idle = per_turn((await bare.bare(turns, tool=False)).wall_ms)
        two = [per_turn((await bare.bare(turns)).wall_ms) for _ in range(3)]
        concurrent = await bare_throughput(
            bare, settings.concurrent_runs, settings.concurrent_turns
        )
    async with BaselineBench.running(env, eager_activities=False) as bare:
        eager_off = [per_turn((await bare.bare(turns, tool=False)).wall_ms) for _ in range(3)]
    return DispatchResult(
        fast_dispatch=fast,
        turns=turns,
        first_run=first,
        later_runs=later,
        after_idle=idle,
        two_activities=two,
        eager_off=eager_off,
        concurrent=concurrent,
    )


# --- 5. workflow steps -----------------------------------------------------------------------


@dataclass(frozen=True)
class StepSample:
    """One sequential Run of N one-activity steps, per step."""

    wall_ms_per_step: float
    """Client-side time from start to result, divided by the steps."""
    steady_ms_per_step: float | None
    """Median interval between consecutive step-activity schedulings (from history)."""
    history_bytes_per_step: float
    """The history size the server accounts, divided by the steps (start and end included)."""
    events_per_step: float
    phases_ms_per_step: dict[str, float]
    """Where the time went, from history event timestamps (see ``_history``)."""
    tool_body_ms: float | None = None
    """WorkflowRun only: median ms inside the tool activity bodies (their ``Latency``)."""


@dataclass(frozen=True)
class WorkflowStepsResult:
    """Section 5: a WorkflowRun of tool steps against the bare one-activity loop."""

    steps: int
    bare: list[StepSample] = field(default_factory=list)
    workflow: list[StepSample] = field(default_factory=list)


def _step_sample(
    wall_ms: float, steps: int, facts: HistoryFacts, tool_body_ms: float | None = None
) -> StepSample:
    return StepSample(
        wall_ms_per_step=wall_ms / steps,
        steady_ms_per_step=facts.turn_ms,
        history_bytes_per_step=facts.server_bytes / steps,
        events_per_step=facts.events / steps,
        phases_ms_per_step={k: v / steps for k, v in facts.breakdown_ms.items()},
        tool_body_ms=tool_body_ms,
    )


async def workflow_steps(
    agent: AgentBench, bare: BaselineBench, settings: Settings
) -> WorkflowStepsResult:
    """Alternate bare loops (one trivial activity per turn) and WorkflowRuns of tool steps."""
    steps = settings.workflow_steps
    result = WorkflowStepsResult(steps=steps)
    # One unmeasured Run of each: section 1 warmed the worker for AgentRun, not for the
    # WorkflowRun class's first sandboxed Run.
    await bare.bare(steps, tool=False)
    await agent.workflow(steps)
    for _ in range(settings.workflow_runs):
        run = await bare.bare(steps, tool=False)
        facts = await history_facts(bare.handle(run.workflow_id), MODEL_ACTIVITY)
        result.bare.append(_step_sample(run.wall_ms, steps, facts))
        timing = await agent.workflow(steps)
        facts = await history_facts(agent.handle(timing.workflow_id), AGENT_TOOL_ACTIVITY)
        bodies = await agent.activity_bodies_ms(timing.workflow_id)
        result.workflow.append(_step_sample(timing.wall_ms, steps, facts, bodies["tool"]))
    return result
