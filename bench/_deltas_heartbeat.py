"""Section 10, the alternative: activity heartbeat details as the channel of the deltas.

An activity heartbeats each of ``PIECES`` pieces (one every ``PACE_SECONDS``) as its
details, on a worker with psych's heartbeat throttle (``HEARTBEAT_THROTTLE``) and the model
call's heartbeat timeout; a poller describes the workflow every ``POLL_SECONDS`` and notes
when each piece became visible. The first beat goes out at once (what the relay's address
needs); later ones are held back by the SDK's throttle, which is what rules this channel
out for deltas.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from psych_runtime.workers._worker import HEARTBEAT_THROTTLE

PIECES = 60
PACE_SECONDS = 0.02
POLL_SECONDS = 0.02
HEARTBEAT_TIMEOUT = timedelta(seconds=30)
"""The model call's (workflows/kernel/_activity_calls.py)."""

_sent: dict[int, float] = {}


@activity.defn(name="bench.heartbeat_pieces")
async def heartbeat_pieces() -> None:
    for n in range(1, PIECES + 1):
        activity.heartbeat(n)
        _sent[n] = time.monotonic()
        await asyncio.sleep(PACE_SECONDS)


@workflow.defn(name="BenchHeartbeatPieces")
class HeartbeatPieces:
    @workflow.run
    async def run(self) -> None:
        await workflow.execute_activity(
            heartbeat_pieces,
            start_to_close_timeout=timedelta(minutes=1),
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
        )


async def heartbeat_channel(client: Client) -> dict[str, Any]:
    """Per piece: when it became visible through DescribeWorkflowExecution after its beat."""
    queue = f"bench-heartbeat-{uuid.uuid4().hex[:8]}"
    _sent.clear()
    visible: dict[int, float] = {}
    describes = 0
    async with Worker(
        client,
        task_queue=queue,
        workflows=[HeartbeatPieces],
        activities=[heartbeat_pieces],
        workflow_runner=UnsandboxedWorkflowRunner(),
        max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
    ):
        handle = await client.start_workflow(
            HeartbeatPieces.run, id=f"bench-hb-{uuid.uuid4().hex}", task_queue=queue
        )
        while len(_sent) < PIECES:
            described = await handle.describe()
            describes += 1
            now = time.monotonic()
            for pending in described.raw_description.pending_activities:
                if pending.heartbeat_details.payloads:
                    (n,) = await client.data_converter.decode(
                        pending.heartbeat_details.payloads, [int]
                    )
                    for piece in range(1, n + 1):
                        visible.setdefault(piece, now)
            await asyncio.sleep(POLL_SECONDS)
        await handle.result()
    lags = sorted((visible[n] - _sent[n]) * 1000 for n in visible)
    return {
        "pieces": PIECES,
        "pieces_seen_while_running": len(visible),
        "first_beat_visible_ms": (visible[1] - _sent[1]) * 1000 if 1 in visible else None,
        "lag_ms": lags,
        "describes": describes,
        "throttle_s": HEARTBEAT_THROTTLE.total_seconds(),
    }
