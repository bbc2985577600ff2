"""Section 12's 50-Run batches again with the dev server on a CPU of its own
(``split_cores``), as when the server runs on machines of its own: ModelLoop, AgentRun
write and AgentRun local, alternating, ``repeats`` rounds."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from bench._process import Split, split_cores
from bench._report import pair_ratios
from bench._sections import Batch
from bench._table import median, rotated, spread, table

SPLIT_KINDS = ("model_loop", "write", "local")
"""The kinds of Run measured with the server apart, in the order of the first round."""


@dataclass
class SplitResult:
    """The batches by kind, and the CPUs they ran on (None: they could not be split, and
    no batch ran)."""

    cpus: Split | None = None
    batches: dict[str, list[Batch]] = field(default_factory=lambda: {k: [] for k in SPLIT_KINDS})

    def ratios(self, kind: str) -> list[float]:
        """Per-pair turns/s ratios of ``kind`` to ModelLoop."""
        return pair_ratios(
            [b.turns_per_s for b in self.batches[kind]],
            [b.turns_per_s for b in self.batches["model_loop"]],
        )

    def lines(self) -> list[str]:
        """The table, and a blank line."""
        if self.cpus is None:
            return ["The server and this process could not be put on CPUs of their own.", ""]
        rows = [
            [
                kind,
                median([b.turns_per_s for b in self.batches[kind]]),
                median([b.process_cpu_ms_per_turn for b in self.batches[kind]]),
                median([b.server_cpu_ms_per_turn for b in self.batches[kind]]),
                "" if kind == "model_loop" else spread(self.ratios(kind)),
            ]
            for kind in SPLIT_KINDS
        ]
        return [
            f"The 50-Run batches again with the server on CPU {self.cpus.server_cpu} and this "
            f"process (workers, fake model, driver) on CPU {self.cpus.process_cpu}, as when "
            "the server has machines of its own; ratio: median [min-max] of pairs.",
            table(
                [
                    "server apart",
                    "turns/s",
                    "proc CPU ms/turn",
                    "server CPU ms/turn",
                    "/ ModelLoop",
                ],
                rows,
            ),
            "",
        ]


async def split_throughput(
    repeats: int,
    batch: Callable[[str], Awaitable[Batch]],
    settle: Callable[[], Awaitable[object]],
    progress: Callable[[str], None],
) -> SplitResult:
    """``repeats`` rounds of one ``batch`` of each kind with the server apart, waiting for
    the server to ``settle`` after each (untimed)."""
    result = SplitResult()
    with split_cores() as cpus:
        result.cpus = cpus
        if cpus is None:
            return result
        progress(f"throughput, the server on CPU {cpus.server_cpu} and this on {cpus.process_cpu}")
        for index in range(repeats):
            for kind in rotated(SPLIT_KINDS, index):
                result.batches[kind].append(await batch(kind))
                await settle()
    return result
