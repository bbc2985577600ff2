"""Ending a process that used a Temporal client without finalizing the interpreter.

The Temporal SDK's Rust core owns threads (the process-wide Runtime, which has no shutdown
call) and client objects that, freed during interpreter finalization, call back into
Python from one of those threads; the interpreter then aborts with "Fatal Python error:
PyGILState_Release ... finalizing" (temporalio/sdk-python#300), after the right output,
in a fraction of runs. ``exit_process`` is the way out for a program that is done: clients
left unreachable are collected while the interpreter is whole, logs and output are
flushed, and ``os._exit`` ends the process with the status.
"""

from __future__ import annotations

import gc
import logging
import os
import sys
from typing import NoReturn


def flush_for_exit(status: int) -> int:
    """Collect unreachable clients, flush logs and output; returns the status to end with.

    A closed standard stream makes a 0 status 1 (what was written may be lost). A reader
    that went away (``| head``) raises ``BrokenPipeError`` for the caller to handle.
    """
    gc.collect()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except ValueError:  # closed
            status = status or 1
    return status


def exit_process(status: int) -> NoReturn:
    """End the process with ``status`` after ``flush_for_exit``, skipping finalization.

    For a program's last line in place of ``sys.exit(status)`` once it has used a Temporal
    client or worker: ``exit_process(asyncio.run(main()))``. Nothing registered with
    ``atexit`` runs; flush what needs flushing (a telemetry exporter) before.
    """
    try:
        status = flush_for_exit(status)
    except BrokenPipeError:  # the reader is gone: what was left is not read
        status = status or 1
    os._exit(status)
