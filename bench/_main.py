"""Run every section, print the tables, write ``bench/results/<timestamp>.json``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

from bench import _report as report
from bench._agent import AgentBench
from bench._baseline import BaselineBench
from bench._codec import codec_cost, codec_summary, codec_text
from bench._followers import followers_cost, followers_summary, followers_text
from bench._long_run import run_long
from bench._mcp import mcp_calls, mcp_summary, mcp_text
from bench._process import dev_server, run_until_terminated
from bench._sections import (
    QUICK,
    DispatchResult,
    Settings,
    dispatch,
    history,
    sequential,
    throughput,
    workflow_steps,
)
from bench._tracing import tracing_cost, tracing_summary, tracing_text
from psych_runtime.workers import FAST_DISPATCH_ARGS, temporal_binary, tune_gc_for_serving

RESULTS = Path(__file__).parent / "results"


def _say(text: str) -> None:
    print(text, flush=True)


def _progress(text: str) -> None:
    print(f"  ... {text}", file=sys.stderr, flush=True)


def _machine() -> dict[str, Any]:
    cli = subprocess.run(
        [temporal_binary(), "--version"], capture_output=True, text=True, check=False
    )
    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "temporalio": version("temporalio"),
        "temporal_cli": cli.stdout.strip(),
    }


def _plain(value: Any) -> Any:
    """JSON-ready: dataclasses to dicts, NaN to null."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _plain(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


async def _run(settings: Settings, quick: bool) -> dict[str, Any]:
    machine = _machine()
    _say(
        f"psych-runtime benchmark: {machine['cpus']} CPUs, Python {machine['python']}, "
        f"temporalio {machine['temporalio']}, {machine['temporal_cli'].splitlines()[0]}"
    )
    _say(
        f"Repetitions are kept small so the whole run takes about 8 minutes on 2 cores "
        f"({settings.sequential_runs} sequential Runs, {settings.concurrent_repeats} concurrent "
        f"batches, 1 Run per history length, {settings.workflow_runs} WorkflowRuns): medians of "
        f"few samples on a noisy machine, so read the ratios, not the absolute times."
        + (" QUICK MODE: a smoke check of the benchmark code, not a measurement." if quick else "")
    )
    sections: dict[str, Any] = {}
    dispatch_results: list[DispatchResult] = []
    with tempfile.TemporaryDirectory(prefix="psych-bench-") as home:
        # The fast server is fresh when section 4 measures its first Run, then serves 1-3.
        async with dev_server(fast_dispatch=True) as env:
            _progress("4. dispatch latency on a fresh fast-dispatch dev server")
            dispatch_results.append(await dispatch(env, True, settings))
            async with (
                AgentBench.running(env, Path(home)) as agent,
                BaselineBench.running(env) as bare,
                BaselineBench.running(env, model=agent.endpoint, sandbox=False) as unsandboxed,
            ):
                # As `psych worker` does once its workers are built; the collector is the
                # process's, so the baselines' workers here have it too.
                tune_gc_for_serving()
                _progress("1. sequential per-turn time")
                seq = await sequential(agent, bare, unsandboxed, settings)
                sections["sequential"] = {
                    "samples": _plain(seq),
                    "summary": report.sequential_summary(seq),
                }
                _say("\n" + report.sequential_text(seq, settings))
                # Measured next to section 1, on a server that holds as few Runs as it did
                # then; printed last, after section 4, to keep the numbering in order.
                _progress("5. WorkflowRun steps, one Run at a time")
                steps = await workflow_steps(agent, bare, settings)
                sections["workflow"] = {
                    "samples": _plain(steps),
                    "summary": report.workflow_summary(steps),
                }
                _progress("6. MCP tool calls against code tool calls")
                mcp = await mcp_calls(env, Path(home), settings.mcp_turns, settings.mcp_runs)
                sections["mcp"] = {"samples": _plain(mcp), "summary": mcp_summary(mcp)}
                _progress("7. payload encryption off and on, one Run at a time")
                codec = await codec_cost(env, Path(home) / "codec", settings)
                sections["codec"] = {
                    "samples": _plain(codec),
                    "summary": codec_summary(codec),
                }
                _progress("8. tracing and metrics off and on, one Run at a time")
                tracing = await tracing_cost(env, Path(home) / "tracing", settings)
                sections["tracing"] = {
                    "samples": _plain(tracing),
                    "summary": tracing_summary(tracing),
                }
                _progress("9. followers of one Run: pushed streams against none and polling")
                followers = await followers_cost(env, Path(home) / "followers", quick)
                sections["followers"] = {
                    "samples": _plain(followers),
                    "summary": followers_summary(followers),
                }
                _progress("2. throughput")
                thr = await throughput(agent, bare, unsandboxed, settings)
                sections["throughput"] = {
                    "samples": _plain(thr),
                    "summary": report.throughput_summary(thr),
                }
                _say("\n" + report.throughput_text(thr))
                _progress("3. history growth (the by-value Run of 200 turns takes a while)")
                his = await history(agent, bare, settings)
                sections["history"] = {
                    "samples": _plain(his),
                    "summary": report.history_summary(his),
                }
                _say("\n" + report.history_text(his))
                sections["targets"] = report.targets_summary(seq, thr, his)
                _say("\n" + report.targets_text(seq, thr, his))
        async with dev_server(fast_dispatch=False) as env:
            _progress("4. dispatch latency on a fresh default dev server")
            dispatch_results.insert(0, await dispatch(env, False, settings))
    sections["dispatch"] = {
        "fast_dispatch_args": list(FAST_DISPATCH_ARGS),
        "samples": _plain(dispatch_results),
        "summary": report.dispatch_summary(dispatch_results),
    }
    _say("\n" + report.dispatch_text(dispatch_results, settings))
    _say("\n" + report.workflow_text(steps))
    _say("\n" + mcp_text(mcp))
    _say("\n" + codec_text(codec))
    _say("\n" + tracing_text(tracing))
    _say("\n" + followers_text(followers))
    return {"machine": machine, "settings": _plain(settings), "sections": sections}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; return the exit status."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="fewer and shorter Runs: checks the benchmark code, measures nothing useful",
    )
    parser.add_argument(
        "--long-run",
        action="store_true",
        help="only the long Run: 1000 turns x 8 tool calls through continue-as-new",
    )
    parser.add_argument("--turns", type=int, default=1000, help="the long Run's turns")
    parser.add_argument(
        "--continue-after-events",
        type=int,
        default=None,
        help="the long Run's continue-as-new threshold (default: the Run's own)",
    )
    args = parser.parse_args(argv)
    if args.long_run:
        run_long(args.turns, args.continue_after_events, RESULTS)
        return 0
    settings = QUICK if args.quick else Settings()
    started_at = datetime.now(UTC)
    started = time.perf_counter()
    results = run_until_terminated(_run(settings, args.quick))
    results = {
        "started_at": started_at.isoformat(),
        "duration_s": time.perf_counter() - started,
        "quick": args.quick,
        **results,
    }
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{started_at.strftime('%Y%m%dT%H%M%SZ')}{'-quick' if args.quick else ''}.json"
    path.write_text(json.dumps(_plain(results), indent=2) + "\n", encoding="utf-8")
    _say(f"\nTook {results['duration_s']:.0f} s. Results: {path}")
    return 0
