"""The replay gate for users: replay Run histories against the installed workflow code.

An operator runs it before promoting a build (``psych replay``): every history either
replays, or its Run is named with the nondeterminism error Temporal raised, which names
the event the code no longer matches. Histories come from JSON files (what ``temporal
workflow show --output json`` and the Temporal UI download) or from the newest Runs of each
workflow type in a namespace.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf.json_format import ParseError
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer

from psych_runtime.specs import NotFound, SpecError
from psych_runtime.workers._plugin import PsychPlugin
from psych_runtime.workflows import AGENT_RUN, WORKFLOW_RUN, AgentRun, WorkflowRun

WORKFLOW_TYPES = (AGENT_RUN, WORKFLOW_RUN)


@dataclass(frozen=True)
class ReplayOutcome:
    """One history's replay.

    Attributes:
        run: the Run's workflow id.
        source: where the history came from (a file path, or ``namespace <name>``).
        failure: the replay's error (None: it replayed); a nondeterminism error names the
            event id and what the code did instead.
    """

    run: str
    source: str
    failure: str | None


def history_files(paths: Iterable[Path]) -> list[Path]:
    """The ``*.json`` files of ``paths`` (a directory stands for its own, sorted).

    Raises:
        NotFound: a path does not exist, or a directory holds no ``.json`` file.
    """
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            inside = sorted(path.glob("*.json"))
            if not inside:
                raise NotFound(f"{path} holds no .json history")
            found.extend(inside)
        elif path.is_file():
            found.append(path)
        else:
            raise NotFound(f"no such history file or directory: {path}")
    return found


def load_history(path: Path) -> WorkflowHistory:
    """A history file under its Run's workflow id.

    The JSON of a history carries no workflow id, and AgentRun checks its own, so it is
    read back from the Run's input (``psych-<tenant>-<run id>``). An input that is not
    plain JSON (a payload codec encrypted it) leaves the file's name as the id.

    Raises:
        SpecError: the file cannot be read, or is not a Temporal history (``check_history``
            says what is wrong); the message names the file.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError(f"{path}: cannot read the history: {err}") from err
    try:
        document = json.loads(text)
    except ValueError as err:
        raise SpecError(f"{path}: not a Temporal history: not JSON ({err})") from err
    if not isinstance(document, dict) or not isinstance(document.get("events"), list):
        raise SpecError(
            f"{path}: not a Temporal history: not a JSON object with an 'events' list "
            "(as `temporal workflow show --output json` writes)"
        )
    try:
        history = WorkflowHistory.from_json(_workflow_id(document) or path.stem, document)
    except (ValueError, ParseError) as err:
        raise SpecError(f"{path}: not a Temporal history: {_first_line(err)}") from err
    problem = check_history(history)
    if problem is not None:
        raise SpecError(f"{path}: not a Temporal history: {problem}")
    return history


def check_history(history: WorkflowHistory) -> str | None:
    """What makes ``history`` unfit to replay, in words; None when it may be replayed.

    Checked before the Replayer sees it because the SDK's core does not fail on these: a
    first event other than WorkflowExecutionStarted makes it panic in a thread and wait
    forever (temporalio 1.35).
    """
    if not history.events:
        return "it has no events"
    first = history.events[0]
    if first.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
        return f"its first event is {_event_name(first.event_type)}, not WorkflowExecutionStarted"
    if not first.HasField("workflow_execution_started_event_attributes"):
        return "its first event, WorkflowExecutionStarted, has no attributes"
    return None


def _event_name(event_type: int) -> str:
    try:
        return EventType.Name(event_type)  # type: ignore[arg-type]  # an int not in the enum
    except ValueError:
        return f"event type {event_type}"


def _first_line(err: Exception) -> str:
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def _workflow_id(document: dict[str, Any]) -> str | None:
    try:
        first = document["events"][0]
        payload = first["workflowExecutionStartedEventAttributes"]["input"]["payloads"][0]
        run = json.loads(base64.b64decode(payload["data"]))
        return f"psych-{run['scope']['tenant']}-{run['run_id']}"
    except (KeyError, IndexError, TypeError, ValueError):
        return None


async def recent_histories(
    client: Client, per_type: int, types: Sequence[str] = WORKFLOW_TYPES
) -> AsyncIterator[WorkflowHistory]:
    """The histories of the newest ``per_type`` Runs of each workflow type in the
    client's namespace (open and settled alike)."""
    for workflow_type in types:
        listed = client.list_workflows(f"WorkflowType = '{workflow_type}'", limit=per_type)
        async for history in listed.map_histories():
            yield history


def replayer(workflows: Sequence[type] = (AgentRun, WorkflowRun)) -> Replayer:
    """A Replayer of psych's workflows (or ``workflows``) with the psych plugin."""
    return Replayer(workflows=list(workflows), plugins=[PsychPlugin()])


async def replay(
    histories: Iterable[tuple[WorkflowHistory, str]] | AsyncIterator[tuple[WorkflowHistory, str]],
    *,
    workflows: Sequence[type] = (AgentRun, WorkflowRun),
) -> list[ReplayOutcome]:
    """Replay each ``(history, source)`` against ``workflows``; one outcome each, in order.

    ``workflows`` defaults to the installed AgentRun and WorkflowRun: what a worker of
    this build would run. A history ``check_history`` refuses fails without being handed
    to the Replayer; one of its start event alone replays (no workflow code ran in it).
    """
    runner = replayer(workflows)
    outcomes: list[ReplayOutcome] = []

    async def one(history: WorkflowHistory, source: str) -> None:
        problem = check_history(history)
        if problem is not None:
            failure: str | None = f"not a Temporal history: {problem}"
        elif len(history.events) == 1:
            # Its first workflow task is not even scheduled (a delayed start): no workflow
            # code ran, so none can disagree; the SDK's core waits forever on such a history.
            failure = None
        else:
            result = await runner.replay_workflow(history, raise_on_replay_failure=False)
            failure = None if result.replay_failure is None else str(result.replay_failure)
        outcomes.append(ReplayOutcome(run=history.workflow_id, source=source, failure=failure))

    if isinstance(histories, AsyncIterator):
        async for history, source in histories:
            await one(history, source)
    else:
        for history, source in histories:
            await one(history, source)
    return outcomes
