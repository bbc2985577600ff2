"""The long Run: 1000 turns of 8 tool calls through a continue-as-new chain.

    python -m bench --long-run              # 1000 turns x 8 calls (a few minutes)
    python -m bench --long-run --turns 50   # shorter, a smoke check of this code

One AgentRun against the fake model on a fresh fast-dispatch dev server: every turn the
model calls the agent's trivial code tool 8 times (arguments differ, so the repeat guard
never fires), and the Run stops at ``max_turns``. No one history could hold it (about 30
events per turn), so it continues as new (``workflows/_continue.py``) whenever Temporal
suggests it or the execution passes ``continue_after_events``. Then
``PsychClient.report`` reads the chain's records (the earlier executions by run id, which
a worker answers by replay) and must show every call. Printed: the chain length, the wall
time, each execution's history (events, bytes, turns), the report's read time; written to
``bench/results/<UTC timestamp>-long-run.json``. Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import json
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench._process import dev_server, run_until_terminated
from psych_runtime.activities import Endpoint, FileVersionStore, LocalBlobStore, ModelEndpoints
from psych_runtime.specs import AgentBuilder, Scope, ToolRegistry
from psych_runtime.testing import FakeModel, Reply, ToolCall
from psych_runtime.workers import WorkerSettings, run_worker
from psych_runtime.workflows import PsychClient, Record, RunContinued, RunStatus, TurnStarted

CALLS_PER_TURN = 8
READ_TIMEOUT = timedelta(minutes=5)
SCOPE = Scope(tenant="bench", principal="bench")


async def part(turn: int, part: int) -> str:
    """Return a short result for one call of a turn.

    Args:
        turn: The turn number.
        part: Which of the turn's calls this is.
    """
    return f"ok {turn}.{part}"


def _responder(body: dict[str, Any]) -> Reply:
    # The turn is one more than the assistant messages sent: the fake model sees the whole
    # conversation, rebuilt from its blobs by the model activity.
    turn = 1 + sum(1 for m in body.get("messages") or [] if m.get("role") == "assistant")
    return Reply.tool_calls(
        *(
            ToolCall("part", {"turn": turn, "part": k}, id=f"t{turn}p{k}")
            for k in range(CALLS_PER_TURN)
        )
    )


async def long_run(turns: int, continue_after_events: int | None) -> dict[str, Any]:
    """Run the long Run; its figures as JSON-ready data."""
    registry = ToolRegistry()
    registry.register(part)
    spec = (
        AgentBuilder("long_run", registry=registry)
        .instructions("Call the tool until told otherwise.")
        .model("fake-model")
        .tool("part")
        .limits(
            max_turns=turns,
            max_steps=turns * (CALLS_PER_TURN + 1),
            deadline_seconds=86_400,
        )
        .build()
    )
    with tempfile.TemporaryDirectory(prefix="psych-long-run-") as tmp:
        async with (
            dev_server(fast_dispatch=True) as env,
            FakeModel(models=("fake-model",), record=False) as fake,
        ):
            fake.responder = _responder
            settings = WorkerSettings(
                task_queue="long-run",
                registry=registry,
                blobs=LocalBlobStore(Path(tmp) / "blobs"),
                endpoints=ModelEndpoints(default=Endpoint(base_url=fake.base_url, api_key="k")),
            )
            client = PsychClient(
                env.client,
                store=FileVersionStore(Path(tmp) / "versions"),
                task_queue="long-run",
                registry=registry,
            )
            async with run_worker(env.client, settings):
                started = time.monotonic()
                run = await client.dispatch(
                    spec,
                    "go",
                    scope=SCOPE,
                    continue_after_events=continue_after_events,
                )
                result = await client.result(run, scope=SCOPE)
                wall = time.monotonic() - started
                read_started = time.monotonic()
                # Each earlier execution answers by replaying its ~4K events on the
                # worker: seconds each, more than a query's default wait on a busy machine.
                report = await client.report(run, scope=SCOPE, query_timeout=READ_TIMEOUT)
                read = time.monotonic() - read_started
                records: list[Record] = []
                while True:
                    page = await client.records(
                        run,
                        scope=SCOPE,
                        after=len(records),
                        limit=5000,
                        query_timeout=READ_TIMEOUT,
                    )
                    records.extend(page.records)
                    if len(records) >= page.last_seq:
                        break
                executions = []
                current = await env.client.get_workflow_handle(run.workflow_id).describe()
                run_ids = [s.run_id for s in page.earlier] + [current.run_id]
                cuts = [r.seq for r in records if isinstance(r, RunContinued)] + [len(records) + 1]
                first = 1
                for run_id, cut in zip(run_ids, cuts, strict=True):
                    described = await env.client.get_workflow_handle(
                        run.workflow_id, run_id=run_id
                    ).describe()
                    info = described.raw_description.workflow_execution_info
                    executions.append(
                        {
                            "run_id": run_id,
                            "events": described.history_length,
                            "bytes": info.history_size_bytes,
                            "turns": sum(
                                isinstance(r, TurnStarted) for r in records[first - 1 : cut - 1]
                            ),
                            "records": cut - first,
                        }
                    )
                    first = cut
    gapless = [r.seq for r in records] == list(range(1, len(records) + 1))
    return {
        "turns": turns,
        "calls_per_turn": CALLS_PER_TURN,
        "continue_after_events": continue_after_events,
        "status": result.status.value,
        "reason": result.reason,
        "wall_s": wall,
        "per_turn_ms": 1000 * wall / turns,
        "report_read_s": read,
        "report_tool_calls": len(report.tool_calls),
        "report_model_calls": len(report.model_calls),
        "totals_tool_calls": result.totals.tool_calls,
        "records": len(records),
        "records_gapless": gapless,
        "chain_length": len(executions),
        "executions": executions,
        "stopped_at_max_turns": result.status is RunStatus.STOPPED,
    }


def long_run_text(figures: dict[str, Any]) -> str:
    """The long Run's figures as a table."""
    lines = [
        f"Long Run: {figures['turns']} turns x {figures['calls_per_turn']} tool calls, "
        f"settled {figures['status']} ({figures['reason']})",
        f"  wall {figures['wall_s']:.1f} s ({figures['per_turn_ms']:.0f} ms/turn); "
        f"chain of {figures['chain_length']} executions",
        f"  report: {figures['report_tool_calls']} tool calls, "
        f"{figures['report_model_calls']} model calls, read in {figures['report_read_s']:.1f} s; "
        f"{figures['records']} records, gapless: {figures['records_gapless']}",
        "",
        f"  {'execution':>9} {'turns':>6} {'records':>8} {'events':>7} {'bytes':>10}",
    ]
    for index, execution in enumerate(figures["executions"], start=1):
        lines.append(
            f"  {index:>9} {execution['turns']:>6} {execution['records']:>8} "
            f"{execution['events']:>7} {execution['bytes']:>10}"
        )
    return "\n".join(lines)


def run_long(turns: int, continue_after_events: int | None, results: Path) -> Path:
    """Run, print and write the long Run's figures; the JSON file's path."""
    started_at = datetime.now(UTC)
    figures = run_until_terminated(long_run(turns, continue_after_events))
    print(long_run_text(figures), flush=True)
    results.mkdir(exist_ok=True)
    path = results / f"{started_at.strftime('%Y%m%dT%H%M%SZ')}-long-run.json"
    path.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    print(f"\nResults: {path}", flush=True)
    return path
