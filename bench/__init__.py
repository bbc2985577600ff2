"""psych-runtime benchmarks: ``make bench`` (``python -m bench``); see bench/README.md.

Benchmarks are not tests: they print medians and ratios against a baseline measured in the
same run, write JSON under ``bench/results/``, and never gate CI.
"""

from __future__ import annotations

__all__: list[str] = []
