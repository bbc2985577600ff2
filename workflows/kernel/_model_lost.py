"""How long a model call may go without a heartbeat before the server gives it up.

The worker running a workflow task tells the heartbeat timeout it wants for the model calls
that task schedules (``MODEL_LOST_EXTERN``: its ``outage_seconds`` plus the margin), so a
fleet that tolerates a longer outage does not lose an answer its model worker still holds,
and one that tolerates a shorter one notices a dead model worker sooner. A heartbeat
timeout is not compared on replay, so reading it is not part of a Run's history.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

MODEL_LOST_AFTER = timedelta(seconds=70)
"""A model call's heartbeat timeout when the worker tells none: a worker's documented
outage tolerance (60 s, ``DEFAULT_OUTAGE_SECONDS`` in workers) plus ``OUTAGE_MARGIN`` (10 s:
the longest a worker holds a heartbeat back, and the server's restart). An answer that
arrived while the server was away is then reported once it is back (the worker completes
the call through its client) instead of the call timing out and being made, and paid for,
again; the cost is that a model worker that died mid-call is noticed after 70 s instead of
30 s. Not read on replay (a heartbeat timeout is not compared), so histories recorded with
30 s replay."""

MODEL_LOST_EXTERN = "psych_runtime.model_lost_after"
"""The extern function a workflows-role worker registers: the heartbeat timeout, in
seconds, of the model calls its workflow tasks schedule."""


def model_lost_after() -> timedelta:
    """The heartbeat timeout of a model call scheduled now: the worker's, else
    ``MODEL_LOST_AFTER``."""
    told = workflow.extern_functions().get(MODEL_LOST_EXTERN)
    return MODEL_LOST_AFTER if told is None else timedelta(seconds=told())
