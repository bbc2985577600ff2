"""Section 6: the per-turn cost of payload encryption (``PsychCodec``) against none.

Two workers of the same code on one fast-dispatch server, each on its own task queue: one
whose client has no codec, one whose client encrypts every payload (AES-256-GCM, one key
for the benchmark's tenant) and therefore also its blobs. AgentRuns of section 1's length
alternate between them (and which goes first alternates), so the machine's drift hits
both alike. The codec's own cost is
also timed in isolation (sealing and opening a model-call-sized payload) to say how much
of the difference is the cipher and how much the rest (bigger payloads, the context
lookups, the blob store's sealing).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.testing import WorkflowEnvironment

from bench._agent import SCOPE, AgentBench, responder
from bench._history import history_facts
from bench._sections import AGENT_MODEL_ACTIVITY, Settings
from bench._table import median, table
from psych_runtime.activities import FileVersionStore
from psych_runtime.testing import FakeModel
from psych_runtime.workers import Key, Keyring, PsychCodec, run_worker
from psych_runtime.workers._client import with_codec
from psych_runtime.workflows import PsychClient

MODEL = "fake-model"
CIPHER_PAYLOAD_BYTES = 2048
CIPHER_ROUNDS = 2000


@dataclass(frozen=True)
class CodecSample:
    """One Run, per turn."""

    wall_ms_per_turn: float
    steady_ms_per_turn: float | None
    history_bytes_per_turn: float


@dataclass
class CodecResult:
    """Section 6: AgentRun with the codec off and on, one Run at a time."""

    turns: int
    off: list[CodecSample] = field(default_factory=list)
    on: list[CodecSample] = field(default_factory=list)
    cipher_us_per_payload: float = float("nan")
    """Sealing then opening one payload of ``CIPHER_PAYLOAD_BYTES``, microseconds."""


@contextlib.asynccontextmanager
async def _bench(
    env: WorkflowEnvironment, home: Path, fake: FakeModel, codec: PsychCodec | None
) -> AsyncIterator[AgentBench]:
    bench = AgentBench(env, home, fake)
    client = with_codec(env.client, codec)
    bench.client = PsychClient(
        client,
        store=FileVersionStore(home / "versions"),
        task_queue=bench.task_queue,
        registry=bench.registry,
    )
    async with run_worker(client, bench.settings):
        yield bench


def _cipher_us(codec: PsychCodec) -> float:
    payload = Payload(metadata={"encoding": b"json/plain"}, data=os.urandom(CIPHER_PAYLOAD_BYTES))
    started = time.perf_counter()
    for _ in range(CIPHER_ROUNDS):
        (sealed,) = codec.seal_for(SCOPE.tenant, [payload])
        codec.open(sealed, SCOPE.tenant)
    return (time.perf_counter() - started) / CIPHER_ROUNDS * 1e6


async def codec_cost(env: WorkflowEnvironment, home: Path, settings: Settings) -> CodecResult:
    """Alternate AgentRuns without and with the codec (after one warm-up Run of each)."""
    turns = settings.sequential_turns
    key = Key("bench-1", SCOPE.tenant, os.urandom(32))
    codec = PsychCodec(Keyring([key], {SCOPE.tenant: key.id}))
    result = CodecResult(turns=turns, cipher_us_per_payload=_cipher_us(codec))
    async with FakeModel(models=(MODEL,), record=False) as fake:
        fake.responder = responder
        async with (
            _bench(env, home / "off", fake, None) as off,
            _bench(env, home / "on", fake, codec) as on,
        ):
            await off.run(turns)
            await on.run(turns)
            pairs = [(off, result.off), (on, result.on)]
            for round_ in range(settings.sequential_runs):
                # Which goes first alternates too: the second Run of a pair measured faster
                # here (a warmer server), which would otherwise favour one side.
                for bench, samples in pairs if round_ % 2 == 0 else pairs[::-1]:
                    timing = await bench.run(turns)
                    facts = await history_facts(
                        bench.handle(timing.workflow_id), AGENT_MODEL_ACTIVITY
                    )
                    samples.append(
                        CodecSample(
                            wall_ms_per_turn=timing.wall_ms / turns,
                            steady_ms_per_turn=facts.turn_ms,
                            history_bytes_per_turn=facts.server_bytes / turns,
                        )
                    )
    return result


def codec_summary(result: CodecResult) -> dict[str, Any]:
    """Medians and ratios of section 7."""
    summary: dict[str, Any] = {"cipher_us_per_payload": result.cipher_us_per_payload}
    for name, samples in (("off", result.off), ("on", result.on)):
        summary[f"{name}_ms_per_turn"] = median([s.wall_ms_per_turn for s in samples])
        summary[f"{name}_steady_ms_per_turn"] = median(
            [s.steady_ms_per_turn or 0.0 for s in samples]
        )
        summary[f"{name}_history_bytes_per_turn"] = median(
            [s.history_bytes_per_turn for s in samples]
        )
    for figure in ("ms_per_turn", "steady_ms_per_turn", "history_bytes_per_turn"):
        summary[f"{figure}_ratio"] = summary[f"on_{figure}"] / summary[f"off_{figure}"]
    return summary


def codec_text(result: CodecResult) -> str:
    """Section 6 as printed."""
    s = codec_summary(result)
    head = (
        f"7. Payload encryption, per turn ({result.turns} turns; median of {len(result.on)} "
        "Runs each, alternating, after one warm-up Run each; fast-dispatch server)"
    )
    rows = [
        [
            label,
            s[f"{name}_ms_per_turn"],
            s["ms_per_turn_ratio"] if name == "on" else 1.0,
            s[f"{name}_steady_ms_per_turn"],
            s["steady_ms_per_turn_ratio"] if name == "on" else 1.0,
            s[f"{name}_history_bytes_per_turn"],
            s["history_bytes_per_turn_ratio"] if name == "on" else 1.0,
        ]
        for label, name in (("AgentRun, codec off", "off"), ("AgentRun, codec on", "on"))
    ]
    main = table(
        ["", "ms/turn (wall)", "ratio", "ms/turn (steady)", "ratio", "history B/turn", "ratio"],
        rows,
    )
    notes = (
        f"The cipher alone: {s['cipher_us_per_payload']:.1f} us to seal and open one "
        f"{CIPHER_PAYLOAD_BYTES:,}-byte payload (AES-256-GCM, mean of {CIPHER_ROUNDS} "
        "rounds).\nCodec on also seals the blob store's blobs; its worker and client are the "
        "codec-off ones' with the codec added."
    )
    return f"{head}\n{main}\n{notes}"
