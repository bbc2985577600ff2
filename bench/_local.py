"""Section 12, local tool calls (issue 27): ``make bench-local`` (``python -m bench._local``).

In one run, on one fresh fast-dispatch dev server, against ``ModelLoop`` (the bare loop
whose model activity sends AgentRun's very request, then a trivial tool activity: two
activities per turn):

- **local**: AgentRun whose tool is read-only, quick and safe to repeat (``small_read``,
  registered ``local_seconds``): its calls run as local activities;
- **write**: AgentRun whose tool is a write (``small_result``): a normal activity per call.

and against ``beating``: ModelLoop whose model activity has the heartbeat timeout every
AgentRun model call has (70 s: a worker dying mid-call is noticed then, not at the call's
start-to-close timeout); what that costs the server shows against ModelLoop.

and against ``StoringLoop`` too: ModelLoop doing the rest of a turn's work by hand, as a
hand-written workflow keeping its conversation by reference must (parsing the answer,
storing the assistant message, a conversation node and the tool message: AgentRun's
three blob files a turn); and against ``LocalModelLoop``: ModelLoop whose trivial tool is
a local activity and whose model activity has the heartbeat timeout AgentRun's has, the
floor of a turn whose tool runs where the workflow task runs (what ``local`` costs beyond
it is the runtime's own work).

Per-turn time (wall and steady, Runs one at a time, alternating), 50-Run turns/s (batches
alternating), and history bytes per turn with a 4 KB result (``read_4kb`` /
``result_4kb``) against ``ResultLoop``, the bare floor. Per pair the ratio to each
baseline (or the floor); printed as median [min-max] of the pairs, and what one blob file
cost at the start and the end; per 50-Run batch, the server's own counts of its RPCs and
store operations per turn (``_server_work.py``); then ModelLoop, write and local batches
again with the server on a CPU of its own (``_split.py``). JSON:
``bench/results/local-<timestamp>.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx

from bench._agent import AgentBench
from bench._baseline import BaselineBench, BaselineRun
from bench._history import TURN_PHASES, history_facts, turn_phases
from bench._process import dev_server, exit_after, run_until_terminated
from bench._report import pair_ratios
from bench._sections import RESULT_BYTES, Batch, _batch
from bench._server_work import ServerWork, settled_counters, work_per_turn
from bench._split import SplitResult, split_throughput
from bench._table import median, rotated, spread, table
from bench._threads import THREADS_NOTE, thread_table
from bench._workflows import MODEL_ACTIVITY, MODEL_REQUEST_ACTIVITY, STORING_MODEL_ACTIVITY
from psych_runtime.activities import LocalBlobStore
from psych_runtime.activities.contract import MODEL_CALL
from psych_runtime.workers import free_port, tune_gc_for_serving

RESULTS = Path(__file__).parent / "results"
KINDS = ("model_loop", "beating", "storing", "local_loop", "write", "local")
"""The Runs measured, in the order each round takes them (rotated each round)."""

BEAT_SECONDS = 70.0
"""``beating``: ModelLoop whose model activity has the heartbeat timeout AgentRun gives
every model call on a worker of the default ``outage_seconds`` (``MODEL_LOST_AFTER`` in
``workflows/kernel/_model_lost.py``)."""


@dataclass(frozen=True)
class LocalSettings:
    """How much ``make bench-local`` does."""

    turns: int = 20
    runs: int = 7
    concurrent_runs: int = 50
    concurrent_turns: int = 10
    repeats: int = 5
    history_turns: tuple[int, ...] = (10, 50)


QUICK = LocalSettings(turns=5, runs=2, concurrent_runs=10, concurrent_turns=4, repeats=1)


@dataclass
class LocalResult:
    """Raw samples, by kind (``KINDS``)."""

    wall_ms: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in KINDS})
    steady_ms: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in KINDS})
    batches: dict[str, list[Batch]] = field(default_factory=lambda: {k: [] for k in KINDS})
    bytes_per_turn: dict[str, list[float]] = field(
        default_factory=lambda: {"floor": [], "write": [], "local": []}
    )
    events_per_turn: dict[str, list[float]] = field(
        default_factory=lambda: {"floor": [], "write": [], "local": []}
    )
    server_work: dict[str, list[ServerWork]] = field(default_factory=lambda: {k: [] for k in KINDS})
    """Per 50-Run batch, the server's operations per turn (its own counters)."""
    phases_ms: dict[str, list[dict[str, float]]] = field(
        default_factory=lambda: {k: [] for k in KINDS}
    )
    """Per single Run, its history's milliseconds per turn in each of ``TURN_PHASES``."""
    split: SplitResult = field(default_factory=SplitResult)
    """The 50-Run batches again, the server on a CPU of its own (``bench._split``)."""
    put_us: dict[str, float] = field(default_factory=dict)
    """Median CPU microseconds of one blob file creation in the Runs' blob volume, at the
    run's start and end (``probe_puts``)."""


PROBE_PUTS = 500


async def probe_puts(root: Path) -> float:
    """Median CPU microseconds of ``PROBE_PUTS`` new 600-byte blobs put into a
    ``LocalBlobStore`` at ``root``: what one blob file costs on this volume now. On this
    VM's ext4 it swings from ~30 us to over 1 ms from one minute to the next (after many
    files were deleted, for one), and a write turn creates three."""
    store = LocalBlobStore(root)
    costs = []
    for index in range(PROBE_PUTS):
        data = f"{index:06d}".encode() * 100
        began = time.thread_time()
        await store.put(data)
        costs.append((time.thread_time() - began) * 1e6)
    return median(costs)


MODEL_ACTIVITIES = frozenset({MODEL_REQUEST_ACTIVITY, STORING_MODEL_ACTIVITY, MODEL_CALL})


async def _one(
    kind: str, agent: AgentBench, model: BaselineBench, turns: int
) -> tuple[float, float, dict[str, float]]:
    """One Run of ``kind``: its wall and steady ms per turn, and its phases per turn."""
    if kind in ("model_loop", "beating", "storing", "local_loop"):
        storing = kind == "storing"
        run = await _starter(kind, agent, model, turns)()
        first = STORING_MODEL_ACTIVITY if storing else MODEL_REQUEST_ACTIVITY
        facts = await history_facts(model.handle(run.workflow_id), first)
        wall = run.wall_ms
    else:
        timing = await agent.run(turns, local=kind == "local")
        facts = await history_facts(agent.handle(timing.workflow_id), MODEL_CALL)
        wall = timing.wall_ms
    steady = facts.turn_ms if facts.turn_ms is not None else float("nan")
    return wall / turns, steady, turn_phases(facts.breakdown_ms, turns, MODEL_ACTIVITIES)


async def _model_loop(kind: str, model: BaselineBench, turns: int) -> BaselineRun:
    return await model.model_loop(turns, BEAT_SECONDS if kind == "beating" else None)


def _starter(
    kind: str, agent: AgentBench, model: BaselineBench, turns: int
) -> Callable[[], Awaitable[BaselineRun]]:
    """Starts one baseline Run of ``kind`` (a kind of ``KINDS`` other than AgentRun's
    ``write`` and ``local``)."""
    if kind in ("model_loop", "beating"):
        return lambda: _model_loop(kind, model, turns)
    if kind == "storing":
        return lambda: model.storing_loop(turns)
    if kind == "local_loop":
        return lambda: model.local_model_loop(turns, BEAT_SECONDS)
    raise ValueError(f"{kind!r} is not a baseline kind")


def _batch_of(
    kind: str, agent: AgentBench, model: BaselineBench, turns: int
) -> Callable[[], Awaitable[object]]:
    """Starts one Run of ``kind``, AgentRun or baseline."""
    if kind in ("write", "local"):
        return lambda: agent.run(turns, local=kind == "local")
    return _starter(kind, agent, model, turns)


async def measure(
    settings: LocalSettings, home: Path, progress: Callable[[str], None]
) -> LocalResult:
    """Every sample of section 12 (see the module)."""
    result = LocalResult()
    result.put_us["start"] = await probe_puts(home / "probe-start")
    metrics = free_port()
    async with (
        dev_server(fast_dispatch=True, metrics_port=metrics) as env,
        httpx.AsyncClient() as http,
        AgentBench.running(env, home) as agent,
        BaselineBench.running(env) as floor,
        BaselineBench.running(
            env, model=agent.endpoint, sandbox=False, blobs=LocalBlobStore(home / "loop-blobs")
        ) as model,
    ):
        # As `psych worker` does once its workers are built; the collector is the
        # process's, so the baselines' workers here have it too.
        tune_gc_for_serving()
        turns = settings.turns
        progress("warm-up: one Run of each")
        model.learn(turns, await agent.request_bodies(turns))
        model.learn(
            settings.concurrent_turns, await agent.request_bodies(settings.concurrent_turns)
        )
        await model.model_loop(turns)
        await agent.run(turns, local=True)
        progress(f"per-turn time: {settings.runs} rounds of {turns}-turn Runs")
        for index in range(settings.runs):
            for kind in rotated(KINDS, index):
                wall, steady, phases = await _one(kind, agent, model, turns)
                result.wall_ms[kind].append(wall)
                result.steady_ms[kind].append(steady)
                result.phases_ms[kind].append(phases)
        runs, cturns = settings.concurrent_runs, settings.concurrent_turns
        progress(f"throughput: {settings.repeats} rounds of {runs} Runs x {cturns} turns")
        counters = await settled_counters(http, metrics)
        for index in range(settings.repeats):
            for kind in rotated(KINDS, index):
                before = counters
                batch = await _batch(runs, cturns, _batch_of(kind, agent, model, cturns))
                # Not timed: the batch's turns/s and CPU are already taken.
                counters = await settled_counters(http, metrics)
                result.batches[kind].append(batch)
                result.server_work[kind].append(work_per_turn(before, counters, runs * cturns))
        result.split = await split_throughput(
            settings.repeats,
            lambda kind: _batch(runs, cturns, _batch_of(kind, agent, model, cturns)),
            lambda: settled_counters(http, metrics),
            progress,
        )
        progress(f"history bytes: {settings.history_turns} turns, 4 KB results")
        for hturns in settings.history_turns:
            run = await floor.results(hturns, RESULT_BYTES)
            facts = await history_facts(floor.handle(run.workflow_id), MODEL_ACTIVITY)
            result.bytes_per_turn["floor"].append(facts.server_bytes / hturns)
            result.events_per_turn["floor"].append(facts.events / hturns)
            for kind in ("write", "local"):
                timing = await agent.run(hturns, result_4kb_tool=True, local=kind == "local")
                facts = await history_facts(agent.handle(timing.workflow_id), MODEL_CALL)
                result.bytes_per_turn[kind].append(facts.server_bytes / hturns)
                result.events_per_turn[kind].append(facts.events / hturns)
    result.put_us["end"] = await probe_puts(home / "probe-end")
    return result


def _pairs(result: LocalResult, kind: str, base: str) -> dict[str, list[float]]:
    """Per-pair ratios of ``kind`` to ``base``: wall, steady, turns/s."""
    return {
        "wall": pair_ratios(result.wall_ms[kind], result.wall_ms[base]),
        "steady": pair_ratios(result.steady_ms[kind], result.steady_ms[base]),
        "turns_per_s": pair_ratios(
            [b.turns_per_s for b in result.batches[kind]],
            [b.turns_per_s for b in result.batches[base]],
        ),
    }


def summary(result: LocalResult) -> dict[str, dict[str, float]]:
    """The median, min and max of the per-pair ratios, by kind: to ModelLoop (the issue's
    targets), to ModelLoop with a beat, StoringLoop and LocalModelLoop
    (``<name>_vs_<base>``) and, for bytes, to the floor; and ``local_loop``: LocalModelLoop
    to ModelLoop, what local activities save a hand-written loop."""
    out: dict[str, dict[str, float]] = {}
    for kind in ("write", "local"):
        figures = _pairs(result, kind, "model_loop")
        for base in ("beating", "storing", "local_loop"):
            figures |= {
                f"{name}_vs_{base}": ratios for name, ratios in _pairs(result, kind, base).items()
            }
        figures["bytes"] = pair_ratios(result.bytes_per_turn[kind], result.bytes_per_turn["floor"])
        figures["turns_per_s_split"] = result.split.ratios(kind)
        row: dict[str, float] = {}
        for name, ratios in figures.items():
            row[f"{name}_ratio"] = median(ratios)
            row[f"{name}_ratio_min"] = min(ratios) if ratios else float("nan")
            row[f"{name}_ratio_max"] = max(ratios) if ratios else float("nan")
        out[kind] = row
    floor = _pairs(result, "local_loop", "model_loop")
    out["local_loop"] = {
        f"{name}_ratio{end}": pick(ratios) if ratios else float("nan")
        for name, ratios in floor.items()
        for end, pick in (("", median), ("_min", min), ("_max", max))
    }
    return out


def text(result: LocalResult, settings: LocalSettings) -> str:
    """The section's tables."""
    rows = []
    for kind in KINDS:
        batches = result.batches[kind]
        rows.append(
            [
                kind,
                median(result.wall_ms[kind]),
                median(result.steady_ms[kind]),
                median([b.turns_per_s for b in batches]),
                median([b.process_cpu_ms_per_turn for b in batches]),
                median([b.server_cpu_ms_per_turn for b in batches]),
                median(result.bytes_per_turn.get(kind, [])),
                median(result.events_per_turn.get(kind, [])),
            ]
        )
    floor = result.bytes_per_turn["floor"]
    rows.append(
        [
            "floor (ResultLoop)",
            "",
            "",
            "",
            "",
            "",
            median(floor),
            median(result.events_per_turn["floor"]),
        ]
    )
    medians = table(
        [
            "medians",
            "wall ms/turn",
            "steady ms/turn",
            "turns/s",
            "proc CPU ms/turn",
            "server CPU ms/turn",
            "history B/turn",
            "events/turn",
        ],
        rows,
    )
    ratios = []
    for base, name in (
        ("model_loop", "ModelLoop"),
        ("beating", "ModelLoop + beat"),
        ("storing", "StoringLoop"),
        ("local_loop", "LocalModelLoop"),
    ):
        for kind in ("local", "write"):
            pairs = _pairs(result, kind, base)
            ratios.append(
                [
                    f"AgentRun {kind} / {name}",
                    spread(pairs["wall"]),
                    spread(pairs["steady"]),
                    spread(pairs["turns_per_s"]),
                    spread(pair_ratios(result.bytes_per_turn[kind], floor)) + " (/ floor)"
                    if base == "model_loop"
                    else "",
                ]
            )
    floor_pairs = _pairs(result, "local_loop", "model_loop")
    ratios.append(
        [
            "LocalModelLoop / ModelLoop",
            spread(floor_pairs["wall"]),
            spread(floor_pairs["steady"]),
            spread(floor_pairs["turns_per_s"]),
            "",
        ]
    )
    ratio_table = table(
        [
            "ratio: median [min-max] of pairs",
            "wall/turn",
            "steady/turn",
            "turns/s",
            "history B/turn",
        ],
        ratios,
    )
    head = (
        f"12. Local tool calls: {settings.turns}-turn Runs one at a time ({settings.runs} "
        f"rounds), {settings.concurrent_runs} Runs x {settings.concurrent_turns} turns at once "
        f"({settings.repeats} rounds), history at {', '.join(map(str, settings.history_turns))}"
        " turns with 4 KB results. Targets (issue 27): local <= 0.85 wall, >= 1.15 turns/s;"
        " write <= 1.05 wall, >= 0.95 turns/s; bytes <= 1.10 the floor."
    )
    threads = thread_table(
        "this process, CPU ms/turn",
        KINDS,
        {k: [b.threads_ms_per_turn for b in result.batches[k]] for k in KINDS},
    )
    work = table(
        [
            "server work per turn",
            "frontend RPCs",
            "history RPCs",
            "store ops",
            "Run writes",
            "history reads",
            "server CPU us / frontend RPC",
        ],
        [_work_row(result, kind) for kind in KINDS],
    )
    puts = (
        f"One blob file (the median of {PROBE_PUTS} puts in the Runs' blob volume): "
        f"{result.put_us.get('start', float('nan')):.0f} us of CPU at the start, "
        f"{result.put_us.get('end', float('nan')):.0f} us at the end; a turn of AgentRun "
        "(either) or StoringLoop creates 3, ModelLoop's none."
    )
    counted = (
        "Server work: medians over the 50-Run batches of the dev server's own counters "
        "(its /metrics), per turn."
    )
    return "\n".join(
        [
            head,
            "",
            medians,
            "",
            ratio_table,
            "",
            *result.split.lines(),
            THREADS_NOTE,
            threads,
            "",
            counted,
            work,
            "",
            *_phase_lines(result),
            puts,
        ]
    )


def _phase_lines(result: LocalResult) -> list[str]:
    """Where a single Run's turn goes, by its history's timestamps."""
    rows = []
    for kind in KINDS:
        runs = result.phases_ms[kind]
        if not runs:
            continue
        phases = [median([run[phase] for run in runs]) for phase in TURN_PHASES]
        rows.append([kind, *phases, sum(phases), median(result.wall_ms[kind])])
    if not rows:
        return []
    return [
        "Where one Run's turn goes: ms per turn in each phase of its history's timestamps "
        "(medians of the per-turn-time Runs). A workflow task's run holds its local "
        "activities; an activity's run its body, the SDK and the completion RPC.",
        table(
            ["phases", "WFT wait", "WFT run", "act. wait", "model run", "tool run", "sum", "wall"],
            rows,
        ),
        "",
    ]


def _work_row(result: LocalResult, kind: str) -> list[object]:
    work = result.server_work[kind]
    if not work:
        return [kind, "-", "-", "-", "-", "-", "-"]
    rpcs = median([w.frontend_rpcs for w in work])
    cpu = median([b.server_cpu_ms_per_turn for b in result.batches[kind]])
    return [
        kind,
        rpcs,
        median([w.history_rpcs for w in work]),
        median([w.persistence_ops for w in work]),
        median([w.execution_writes for w in work]),
        median([w.history_reads for w in work]),
        cpu * 1000 / rpcs if rpcs else "-",
    ]


def main(argv: list[str] | None = None) -> int:
    """Run section 12, print it, write its JSON."""
    parser = argparse.ArgumentParser(prog="python -m bench._local", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a smoke check, not a measurement")
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else LocalSettings()

    def progress(line: str) -> None:
        print(f"  ... {line}", file=sys.stderr, flush=True)

    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="psych-bench-local-") as home:
        result = run_until_terminated(measure(settings, Path(home), progress))
    print(text(result, settings))
    print(f"\n({time.monotonic() - began:.0f} s)")
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = RESULTS / f"local-{stamp}.json"
    payload = {
        "settings": asdict(settings),
        "samples": asdict(result),
        "summary": summary(result),
        "quick": args.quick,
    }
    out.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    exit_after(main)
