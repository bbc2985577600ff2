"""Medians, ratios and the printed tables of each section."""

from __future__ import annotations

from typing import Any

from bench._sections import (
    AGENT_MODEL_ACTIVITY,
    AGENT_TOOL_ACTIVITY,
    Batch,
    DispatchResult,
    HistoryResult,
    HistorySample,
    RunSample,
    SequentialResult,
    Settings,
    StepSample,
    ThroughputResult,
    WorkflowStepsResult,
)
from bench._table import median, table
from bench._workflows import MODEL_ACTIVITY, MODEL_REQUEST_ACTIVITY, TOOL_ACTIVITY

_ROLE = {
    MODEL_ACTIVITY: "model",
    MODEL_REQUEST_ACTIVITY: "model",
    AGENT_MODEL_ACTIVITY: "model",
    TOOL_ACTIVITY: "tool",
    AGENT_TOOL_ACTIVITY: "tool",
}
_PHASES = (
    "workflow task: wait",
    "workflow task: run",
    "activity: wait",
    "activity: run model",
    "activity: run tool",
)


# Section 5: the bare loop's one activity and the WorkflowRun's tool activity are each a step.
# The catalogue is a local activity: its time is in "workflow task: run".
_STEP_ROLE = {MODEL_ACTIVITY: "step", AGENT_TOOL_ACTIVITY: "step"}
_STEP_PHASES = (
    "workflow task: wait",
    "workflow task: run",
    "activity: wait",
    "activity: run step",
)


def _median_phases(
    per_sample: list[dict[str, float]], roles: dict[str, str], phases: tuple[str, ...]
) -> dict[str, float]:
    """Median ms of each phase over the samples, activity types named by their role."""
    by_role: list[dict[str, float]] = []
    for sample in per_sample:
        renamed: dict[str, float] = {}
        for phase, ms in sample.items():
            prefix, _, activity = phase.partition("activity: run ")
            key = f"activity: run {roles.get(activity, activity)}" if activity else prefix
            renamed[key] = renamed.get(key, 0.0) + ms
        by_role.append(renamed)
    return {phase: median([s.get(phase, 0.0) for s in by_role]) for phase in phases}


def _phases(samples: list[RunSample]) -> dict[str, float]:
    """Median ms/turn of each phase of section 1."""
    return _median_phases([s.phases_ms_per_turn for s in samples], _ROLE, _PHASES)


def sequential_summary(result: SequentialResult) -> dict[str, Any]:
    """Medians and ratios of section 1."""
    bare = median([s.wall_ms_per_turn for s in result.bare])
    agent = median([s.wall_ms_per_turn for s in result.agent])
    bare_steady = median([s.steady_ms_per_turn or 0.0 for s in result.bare])
    agent_steady = median([s.steady_ms_per_turn or 0.0 for s in result.agent])
    model = median([s.wall_ms_per_turn for s in result.model_floor])
    model_steady = median([s.steady_ms_per_turn or 0.0 for s in result.model_floor])
    bodies = {
        role: median([x.activity_bodies_ms.get(role, float("nan")) for x in result.agent])
        for role in ("model", "tool")
    }
    return {
        "agent_activity_bodies_ms": bodies,
        "bare_ms_per_turn": bare,
        "agent_ms_per_turn": agent,
        "ratio": agent / bare,
        "bare_steady_ms_per_turn": bare_steady,
        "agent_steady_ms_per_turn": agent_steady,
        "steady_ratio": agent_steady / bare_steady,
        "bare_phases_ms_per_turn": _phases(result.bare),
        "agent_phases_ms_per_turn": _phases(result.agent),
        "model_floor_ms_per_turn": model,
        "model_floor_ratio": model / bare,
        "model_floor_steady_ms_per_turn": model_steady,
        "model_floor_steady_ratio": model_steady / bare_steady,
        "model_floor_phases_ms_per_turn": _phases(result.model_floor),
    }


def sequential_text(result: SequentialResult, settings: Settings) -> str:
    """Section 1 as printed."""
    s = sequential_summary(result)
    head = (
        f"1. Per-turn time, one Run at a time ({result.turns} turns; median of "
        f"{len(result.agent)} Runs each, after one warm-up Run; fast-dispatch server)"
    )
    main = table(
        ["", "ms/turn (wall)", "ratio", "ms/turn (steady)", "ratio"],
        [
            ["bare loop (floor)", s["bare_ms_per_turn"], 1.0, s["bare_steady_ms_per_turn"], 1.0],
            [
                "bare loop + model request, no sandbox",
                s["model_floor_ms_per_turn"],
                s["model_floor_ratio"],
                s["model_floor_steady_ms_per_turn"],
                s["model_floor_steady_ratio"],
            ],
            [
                "AgentRun",
                s["agent_ms_per_turn"],
                s["ratio"],
                s["agent_steady_ms_per_turn"],
                s["steady_ratio"],
            ],
        ],
    )
    bare_p, agent_p = s["bare_phases_ms_per_turn"], s["agent_phases_ms_per_turn"]
    model_p = s["model_floor_phases_ms_per_turn"]
    bodies = s["agent_activity_bodies_ms"]
    phases = table(
        [
            "where a turn's time goes (ms/turn)",
            "bare loop",
            "+ model request",
            "AgentRun",
            "AgentRun - bare",
        ],
        [[p, bare_p[p], model_p[p], agent_p[p], agent_p[p] - bare_p[p]] for p in _PHASES]
        + [
            ["  model activity body (own Latency)", "~0", "", bodies["model"], ""],
            ["  tool activity body (own Latency)", "~0", "", bodies["tool"], ""],
        ],
    )
    notes = (
        "wall = start to result at the client / turns; steady = median gap between "
        "consecutive model-activity schedulings.\nPhases come from history event "
        "timestamps; 'wait' is schedule-to-start, 'run' start-to-complete as the server "
        "saw it;\n'body' is the time the activity measured inside itself (without the SDK, "
        "payload conversion and RPCs).\nThe AgentRun figures include the fake model server, "
        "which runs in this process and shares its CPU."
    )
    return f"{head}\n{main}\n\n{phases}\n{notes}"


def _batches(batches: list[Batch]) -> dict[str, float]:
    return {
        "turns_per_s": median([b.turns_per_s for b in batches]),
        "process_cpu_ms_per_turn": median([b.process_cpu_ms_per_turn for b in batches]),
        "server_cpu_ms_per_turn": median([b.server_cpu_ms_per_turn for b in batches]),
    }


def throughput_summary(result: ThroughputResult) -> dict[str, Any]:
    """Medians and ratios of section 2."""
    bare, agent = _batches(result.bare), _batches(result.agent)
    model = _batches(result.model_floor)
    unsandboxed = _batches(result.bare_unsandboxed)
    return {
        "bare_unsandboxed": unsandboxed,
        "bare_unsandboxed_ratio": unsandboxed["turns_per_s"] / bare["turns_per_s"],
        "bare": bare,
        "agent": agent,
        "ratio": agent["turns_per_s"] / bare["turns_per_s"],
        "model_floor": model,
        "model_floor_ratio": model["turns_per_s"] / bare["turns_per_s"],
    }


def throughput_text(result: ThroughputResult) -> str:
    """Section 2 as printed."""
    s = throughput_summary(result)
    head = (
        f"2. Throughput: {result.runs} Runs at once x {result.turns} turns "
        f"(median of {len(result.agent)} batches each; fast-dispatch server)"
    )
    rows: list[list[object]] = []
    for name, key, batches, ratio in (
        ("bare loop (floor)", "bare", result.bare, 1.0),
        (
            "bare loop, no sandbox",
            "bare_unsandboxed",
            result.bare_unsandboxed,
            s["bare_unsandboxed_ratio"],
        ),
        (
            "bare loop + model request, no sandbox",
            "model_floor",
            result.model_floor,
            s["model_floor_ratio"],
        ),
        ("AgentRun", "agent", result.agent, s["ratio"]),
    ):
        rows.append(
            [
                name,
                s[key]["turns_per_s"],
                ratio,
                s[key]["process_cpu_ms_per_turn"],
                s[key]["server_cpu_ms_per_turn"],
                _list([b.turns_per_s for b in batches]),
            ]
        )
    body = table(
        [
            "",
            "turns/s",
            "ratio",
            "CPU ms/turn: this process",
            "dev server",
            "batches (turns/s)",
        ],
        rows,
    )
    note = (
        "'this process' is the worker, the fake model server and the client; a 2-core machine "
        "runs out of CPU, so the CPU per turn is what sets the turns/s.\nThe baselines run "
        "on a default Temporal worker (in the workflow sandbox) but for 'no sandbox', which "
        "runs as psych's workers run AgentRun."
    )
    return f"{head}\n{body}\n{note}"


def _per_turn(sample: HistorySample) -> float:
    return sample.server_bytes / max(sample.turns_done, 1)


def history_summary(result: HistoryResult) -> dict[str, Any]:
    """Bytes per turn and their growth in section 3."""

    def growth(samples: list[HistorySample]) -> float:
        done = [s for s in samples if s.failure is None]
        return _per_turn(done[-1]) / _per_turn(done[0]) if len(done) > 1 else float("nan")

    floor = {s.turns: _per_turn(s) for s in result.floor}
    ratios = {s.turns: _per_turn(s) / floor[s.turns] for s in result.agent if s.turns in floor}
    return {
        "agent_bytes_per_turn": {s.turns: _per_turn(s) for s in result.agent},
        "floor_bytes_per_turn": floor,
        "bytes_ratio": ratios,
        "conversation_bytes_per_turn": {s.turns: _per_turn(s) for s in result.conversation},
        "agent_growth": growth(result.agent),
        "conversation_growth": growth(result.conversation),
    }


def history_text(result: HistoryResult) -> str:
    """Section 3 as printed."""
    s = history_summary(result)
    head = (
        f"3. History size, {result.result_bytes // 1024} KB tool result per turn "
        "(bytes as the server accounts them against its 50 MB limit)"
    )
    rows: list[list[object]] = []
    for name, samples in (
        ("ResultLoop (floor)", result.floor),
        ("AgentRun (by reference)", result.agent),
        ("ConversationLoop (by value)", result.conversation),
    ):
        for sample in samples:
            rows.append(
                [
                    name,
                    sample.turns,
                    sample.turns_done,
                    sample.server_bytes,
                    _per_turn(sample),
                    sample.events,
                    sample.closed_by.removeprefix("WORKFLOW_EXECUTION_").lower(),
                ]
            )
    body = table(["", "turns", "done", "history bytes", "bytes/turn", "events", "closed"], rows)
    agent_lengths = [x.turns for x in result.agent]
    conv_lengths = [x.turns for x in result.conversation if x.failure is None]
    ratios = ", ".join(f"{n} turns x{r:.2f}" for n, r in s["bytes_ratio"].items())
    lines = [
        head,
        body,
        f"AgentRun bytes/turn over the floor's (ResultLoop: the same activities and 4 KB "
        f"result, nothing else): {ratios}",
        f"bytes/turn, longest over shortest completed Run: AgentRun x{s['agent_growth']:.2f} "
        f"({agent_lengths[0]} -> {agent_lengths[-1]} turns; linear history = x1), "
        f"ConversationLoop x{s['conversation_growth']:.2f} "
        f"({conv_lengths[0]} -> {conv_lengths[-1]} turns; quadratic = grows with turns)",
    ]
    lines += [
        f"ConversationLoop of {x.turns} turns stopped after {x.turns_done} turns: {x.failure}"
        for x in result.conversation
        if x.failure
    ]
    warned = {n: c for n, c in result.payload_warnings.items() if c}
    if warned:
        lines.append(
            "the SDK warned of a payload over 512 KB (TMPRL1103) "
            + ", ".join(f"{c} times in the {n}-turn Run" for n, c in warned.items())
            + " (the by-value model input; AgentRun's largest payload stays one message)"
        )
    return "\n".join(lines)


def dispatch_summary(results: list[DispatchResult]) -> dict[str, Any]:
    """Medians of section 4, per server."""
    return {
        ("fast" if r.fast_dispatch else "default"): {
            "first_run_ms_per_turn": r.first_run,
            "later_runs_ms_per_turn": median(r.later_runs),
            "after_idle_ms_per_turn": r.after_idle,
            "two_activities_ms_per_turn": median(r.two_activities),
            "eager_off_ms_per_turn": median(r.eager_off),
            "concurrent_turns_per_s": r.concurrent.turns_per_s,
            "concurrent_server_cpu_ms_per_turn": r.concurrent.server_cpu_ms_per_turn,
        }
        for r in results
    }


def dispatch_text(results: list[DispatchResult], settings: Settings) -> str:
    """Section 4 as printed."""
    turns = results[0].turns if results else settings.dispatch_turns
    head = (
        f"4. Dispatch latency: bare loop, 1 activity/turn, {turns} turns, on a freshly "
        f"started dev server each (ms/turn; 'later' = median of "
        f"{settings.dispatch_later_runs} back-to-back Runs)"
    )
    rows = [
        [
            "fast (FAST_DISPATCH_ARGS: 1000/s)"
            if r.fast_dispatch
            else "default (transferProcessorMaxPollRPS 20/s)",
            r.first_run,
            median(r.later_runs),
            r.after_idle,
            median(r.two_activities),
            median(r.eager_off),
            r.concurrent.turns_per_s,
        ]
        for r in results
    ]
    body = table(
        [
            "dev server",
            "first run",
            "later runs",
            f"after {settings.dispatch_idle_s:g} s idle",
            "2 activities/turn",
            "eager dispatch off",
            f"turns/s, {settings.concurrent_runs} at once",
        ],
        rows,
    )
    return f"{head}\n{body}"


def _steps(samples: list[StepSample]) -> dict[str, Any]:
    return {
        "ms_per_step": median([s.wall_ms_per_step for s in samples]),
        "steady_ms_per_step": median([s.steady_ms_per_step or 0.0 for s in samples]),
        "history_bytes_per_step": median([s.history_bytes_per_step for s in samples]),
        "events_per_step": median([s.events_per_step for s in samples]),
        "phases_ms_per_step": _median_phases(
            [s.phases_ms_per_step for s in samples], _STEP_ROLE, _STEP_PHASES
        ),
    }


def workflow_summary(result: WorkflowStepsResult) -> dict[str, Any]:
    """Medians and ratios of section 5."""
    bare, workflow = _steps(result.bare), _steps(result.workflow)
    bodies = [s.tool_body_ms for s in result.workflow if s.tool_body_ms is not None]
    return {
        "bare": bare,
        "workflow": {**workflow, "tool_activity_body_ms": median(bodies)},
        "ratio": workflow["ms_per_step"] / bare["ms_per_step"],
        "steady_ratio": workflow["steady_ms_per_step"] / bare["steady_ms_per_step"],
        "history_ratio": workflow["history_bytes_per_step"] / bare["history_bytes_per_step"],
    }


def workflow_text(result: WorkflowStepsResult) -> str:
    """Section 5 as printed."""
    s = workflow_summary(result)
    bare, workflow = s["bare"], s["workflow"]
    head = (
        f"5. WorkflowRun of {result.steps} tool steps, one Run at a time (median of "
        f"{len(result.workflow)} Runs each, after one warm-up Run; fast-dispatch server)"
    )
    main = table(
        [
            "",
            "ms/step (wall)",
            "ratio",
            "ms/step (steady)",
            "ratio",
            "history bytes/step",
            "ratio",
            "events/step",
        ],
        [
            [
                "bare loop, 1 activity/turn (floor)",
                bare["ms_per_step"],
                1.0,
                bare["steady_ms_per_step"],
                1.0,
                bare["history_bytes_per_step"],
                1.0,
                bare["events_per_step"],
            ],
            [
                "WorkflowRun, 1 code tool/step",
                workflow["ms_per_step"],
                s["ratio"],
                workflow["steady_ms_per_step"],
                s["steady_ratio"],
                workflow["history_bytes_per_step"],
                s["history_ratio"],
                workflow["events_per_step"],
            ],
        ],
    )
    bare_p, flow_p = bare["phases_ms_per_step"], workflow["phases_ms_per_step"]
    phases = table(
        ["where a step's time goes (ms/step)", "bare loop", "WorkflowRun", "difference"],
        [[p, bare_p[p], flow_p[p], flow_p[p] - bare_p[p]] for p in _STEP_PHASES]
        + [["  tool activity body (own Latency)", "~0", workflow["tool_activity_body_ms"], ""]],
    )
    notes = (
        "A WorkflowRun of N tool steps runs N code-tool activities (its catalogue is a local "
        "activity); the floor is N\nturns of the bare loop with one trivial activity each. "
        "steady = "
        "median gap between consecutive step-activity schedulings;\nbytes/step = the "
        "server-accounted history size / steps, the start (input, the Version's spec) and "
        "the end included."
    )
    return f"{head}\n{main}\n\n{phases}\n{notes}"


def _list(values: list[float]) -> str:
    return ", ".join(f"{v:.1f}" for v in values)


def pair_ratios(agent: list[float], bare: list[float]) -> list[float]:
    """Ratios of alternated samples, pair by pair (the two of a pair saw the same load)."""
    return [a / b for a, b in zip(agent, bare, strict=False) if b]


def _spread(values: list[float]) -> str:
    if not values:
        return "n/a"
    return f"x{median(values):.2f} [x{min(values):.2f}-x{max(values):.2f}, n={len(values)}]"


def targets_summary(
    seq: SequentialResult, thr: ThroughputResult, his: HistoryResult
) -> dict[str, Any]:
    """Issue 15's three ratios against the floor: medians of the pairs, with their spread."""
    per_turn = pair_ratios(
        [s.wall_ms_per_turn for s in seq.agent], [s.wall_ms_per_turn for s in seq.bare]
    )
    steady = pair_ratios(
        [s.steady_ms_per_turn or 0.0 for s in seq.agent],
        [s.steady_ms_per_turn or 0.0 for s in seq.bare],
    )
    turns_per_s = pair_ratios([b.turns_per_s for b in thr.agent], [b.turns_per_s for b in thr.bare])
    bytes_ratio = list(history_summary(his)["bytes_ratio"].values())
    return {
        "per_turn_ratios": per_turn,
        "steady_ratios": steady,
        "turns_per_s_ratios": turns_per_s,
        "bytes_ratios": bytes_ratio,
        # Against the floor that makes the model request (not issue 15's target: what the
        # runtime adds over the model call itself).
        "model_floor_per_turn_ratios": pair_ratios(
            [s.wall_ms_per_turn for s in seq.agent], [s.wall_ms_per_turn for s in seq.model_floor]
        ),
        "model_floor_steady_ratios": pair_ratios(
            [s.steady_ms_per_turn or 0.0 for s in seq.agent],
            [s.steady_ms_per_turn or 0.0 for s in seq.model_floor],
        ),
        "model_floor_turns_per_s_ratios": pair_ratios(
            [b.turns_per_s for b in thr.agent], [b.turns_per_s for b in thr.model_floor]
        ),
        # Against the bare loop on an unsandboxed worker, as psych's workers run AgentRun.
        "unsandboxed_turns_per_s_ratios": pair_ratios(
            [b.turns_per_s for b in thr.agent], [b.turns_per_s for b in thr.bare_unsandboxed]
        ),
    }


def targets_text(seq: SequentialResult, thr: ThroughputResult, his: HistoryResult) -> str:
    """The three ratios against the floor, one line each, with their targets."""
    t = targets_summary(seq, thr, his)
    rows = [
        ["history bytes/turn (section 3, per length)", _spread(t["bytes_ratios"]), "<= x1.10"],
        [
            "50-Run turns/s (section 2, per batch pair)",
            _spread(t["turns_per_s_ratios"]),
            ">= x1.00",
        ],
        ["per-turn time, wall (section 1, per pair)", _spread(t["per_turn_ratios"]), "<= x1.00"],
        ["per-turn time, steady (section 1, per pair)", _spread(t["steady_ratios"]), "<= x1.00"],
    ]
    body = table(["AgentRun / floor", "median [min-max]", "target"], rows)
    model_rows = [
        ["50-Run turns/s (section 2)", _spread(t["model_floor_turns_per_s_ratios"])],
        ["per-turn time, wall (section 1)", _spread(t["model_floor_per_turn_ratios"])],
        ["per-turn time, steady (section 1)", _spread(t["model_floor_steady_ratios"])],
    ]
    model = table(["AgentRun / (floor + model request)", "median [min-max]"], model_rows)
    unsandboxed = _spread(t["unsandboxed_turns_per_s_ratios"])
    note = (
        "The second table is not a target: its floor also makes the model request "
        "(ModelLoop: the requests AgentRun sent, replayed\non an unsandboxed worker, as "
        "AgentRun runs), so it shows what the runtime adds over the model call itself.\n"
        "The floor runs in the workflow sandbox (a default worker), AgentRun without it; "
        f"against the bare loop unsandboxed too, AgentRun's 50-Run turns/s are {unsandboxed}."
    )
    return f"Against the floor, this run (issue 15)\n{body}\n\n{model}\n{note}"
