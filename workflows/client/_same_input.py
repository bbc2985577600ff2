"""Whether a dispatch sent again under its idempotency key carries the input of the Run the
key started (``PsychClient.dispatch``)."""

from __future__ import annotations

from temporalio.client import Client

from psych_runtime.specs import PsychError, Version
from psych_runtime.workflows.client._asked import TEMPORAL_READ_TIMEOUT, history_events
from psych_runtime.workflows.contract._contract import AgentRunInput, WorkflowRunInput


async def check_same_input(
    temporal: Client,
    workflow_id: str,
    key: str,
    version: Version,
    messages: tuple[str, ...],
    thread: str | None,
) -> None:
    """Refuse when the Run ``key`` reached was started with other input.

    The Run's input is the first event of its history, which the server answers without a
    worker (within ``TEMPORAL_READ_TIMEOUT``); on a Run this dispatch has just started it
    is this input.

    Raises:
        PsychError: the Run was started with another Version, other messages or another
            thread (the message says which), or its history holds no input.
        HistoryNotRead: Temporal did not answer its history's first page in time.
        TemporalCancelled: it gave that page up at once (a CANCELLED under load).
    """
    handle = temporal.get_workflow_handle(workflow_id)
    started = None
    pages = handle.fetch_history_events(page_size=1, rpc_timeout=TEMPORAL_READ_TIMEOUT)
    async for event in history_events(pages, workflow_id, TEMPORAL_READ_TIMEOUT):
        started = event.workflow_execution_started_event_attributes
        break
    if started is None or not started.input.payloads:
        raise PsychError(f"Run {workflow_id} has no input in its history to compare with")
    input_type = AgentRunInput if version.spec.kind == "agent" else WorkflowRunInput
    (first,) = await temporal.data_converter.decode(started.input.payloads[:1], [input_type])
    if first.version.hash != version.hash:
        what = f"Version {first.version.hash}, this dispatch {version.hash}"
    elif tuple(first.messages) != messages:
        what = "other messages"
    elif (first.thread.run if first.thread else None) != thread:
        what = "another thread"
    else:
        return
    raise PsychError(
        f"idempotency key {key!r} already started Run {workflow_id} with another input "
        f"({what}); a key names one dispatch, so new input needs a new key"
    )
