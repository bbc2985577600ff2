"""``psych ARGS...`` as its executable runs it (``main``), then the clients it left open told.

Run as a script (``python _main_collected.py ARGS...``), never imported by tests. Once
``main`` returns, everything the command made is unreachable; here it is collected, with
the heap ``psych worker`` froze at start-up (``tune_gc_for_serving``, which holds the
stores it built) unfrozen first, and each ``ResourceWarning`` that collection raises (an
aiohttp session or connector never closed: "Unclosed client session") is printed to
standard error as ``unclosed: <warning>``. The process then ends as ``psych`` does
(``os._exit`` with ``main``'s status).
"""

from __future__ import annotations

import gc
import os
import sys
import warnings

from psych_runtime.workers.cli import main


def run(argv: list[str]) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        status = main(argv)
        gc.unfreeze()
        gc.collect()
    for warning in caught:
        if issubclass(warning.category, ResourceWarning):
            print(f"unclosed: {warning.message}", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    run(sys.argv[1:])
