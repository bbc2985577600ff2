"""What ``tests/forking/test_host.py`` starts, forked or executed: says how it was started.

``python -m tests.forking.probe WHAT`` (or this file as a script), WHAT one of: ``info``
(one JSON line: ``sys.path[0]``, ``sys.argv``, signal dispositions, whether the worker stack
was imported before it ran, i.e. forked), ``stdin`` (echoes stdin, upper-cased), ``wait``
(prints "ready", then sleeps), ``interrupted`` (raises KeyboardInterrupt), ``child`` (runs
a child process of its own, prints its status), ``exit N`` (``sys.exit(N)``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

FORKED_MARK = "psych_runtime.workers.cli._runs"
"""A module the host imports and this script does not: there when the probe was forked."""


def _disposition(signum: int) -> str:
    handler = signal.getsignal(signum)
    if handler is signal.default_int_handler:
        return "default_int_handler"
    return str(handler)


def main() -> None:
    what = sys.argv[1]
    if what == "info":
        info = {
            "path0": sys.path[0],
            "argv": sys.argv,
            "forked": FORKED_MARK in sys.modules,
            "pythonpath": os.environ.get("PYTHONPATH"),
            "path": sys.path,
            "signals": {
                name: _disposition(getattr(signal, name))
                for name in ("SIGINT", "SIGTERM", "SIGCHLD", "SIGPIPE")
            },
            "blocked": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
            "stdout_seekable": sys.stdout.seekable(),
        }
        print(json.dumps(info))
    elif what == "stdin":
        print(sys.stdin.read().upper(), end="")
    elif what == "wait":
        print("ready", flush=True)
        time.sleep(120)
    elif what == "interrupted":
        raise KeyboardInterrupt
    elif what == "child":
        done = subprocess.run([sys.executable, "-c", "import sys; sys.exit(3)"], check=False)
        print(f"child {done.returncode}")
    elif what == "exit":
        sys.exit(int(sys.argv[2]))
    else:
        sys.exit(f"probe: no such WHAT: {what!r}")


if __name__ == "__main__":
    main()
