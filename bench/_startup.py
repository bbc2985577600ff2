"""Section 11: how fast the CLI starts. One command, ~30 s: ``python -m bench._startup``.

Each command runs ``--runs`` times (default 10) in a fresh interpreter, the commands taking
turns so that load from elsewhere falls on all of them alike. Per command: the median and
minimum wall time and the median CPU time (user + system of the child). The baselines,
measured in the same run: the bare interpreter (``python -c pass``) and the floor of any
command that reads a Spec (importing pydantic and PyYAML); each command's ratio is to that
floor. Issue 28's target: ``psych --help`` and ``psych validate`` under 0.4 s.

The commands run as an installed ``psych`` does: with byte-code caching on
(``PYTHONDONTWRITEBYTECODE`` removed from their environment; the warm-up run writes the
caches), so no run pays for compiling the package's sources.

Writes ``bench/results/startup-<UTC timestamp>.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results"
PSYCH = str(Path(sys.executable).with_name("psych"))
FLOOR = "import pydantic + yaml"
COMMANDS: dict[str, list[str]] = {
    "python -c pass": [sys.executable, "-c", "pass"],
    FLOOR: [sys.executable, "-c", "import pydantic, yaml"],
    "psych --help": [PSYCH, "--help"],
    "psych validate": [
        PSYCH,
        "validate",
        "examples/support-agent.yaml",
        "--tools",
        "examples/tools.py:registry",
    ],
    "psych schema": [PSYCH, "schema"],
    "psych run --help": [PSYCH, "run", "--help"],
}


_ENV = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}


def _once(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run of ``argv``, which must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, cwd=REPO, env=_ENV, capture_output=True, check=True, timeout=120)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def measure(runs: int) -> dict[str, dict[str, Any]]:
    """Every command's samples and summary, the commands interleaved run by run."""
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in COMMANDS}
    for argv in COMMANDS.values():
        _once(argv)  # warm the file cache: the first run of a command reads its files cold
    for _ in range(runs):
        for name, argv in COMMANDS.items():
            samples[name].append(_once(argv))
    floor = statistics.median(wall for wall, _ in samples[FLOOR])
    summary: dict[str, dict[str, Any]] = {}
    for name, taken in samples.items():
        walls = [wall for wall, _ in taken]
        median = statistics.median(walls)
        summary[name] = {
            "wall_median_s": median,
            "wall_min_s": min(walls),
            "cpu_median_s": statistics.median(cpu for _, cpu in taken),
            "ratio_to_floor": median / floor,
            "samples": [{"wall_s": wall, "cpu_s": cpu} for wall, cpu in taken],
        }
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench._startup", description=__doc__)
    parser.add_argument("--runs", type=int, default=10, help="runs of each command (10)")
    args = parser.parse_args(argv)
    summary = measure(args.runs)
    print(f"CLI start-up, {args.runs} runs each, load average {os.getloadavg()[0]:.2f}")
    print(f"{'command':<24} {'wall median':>12} {'wall min':>9} {'cpu median':>11} {'ratio':>6}")
    for name, row in summary.items():
        print(
            f"{name:<24} {row['wall_median_s']:>11.3f}s {row['wall_min_s']:>8.3f}s "
            f"{row['cpu_median_s']:>10.3f}s {row['ratio_to_floor']:>6.2f}"
        )
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = RESULTS / f"startup-{stamp}.json"
    out.write_text(json.dumps({"runs": args.runs, "commands": summary}, indent=2) + "\n")
    print(f"wrote {out.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
