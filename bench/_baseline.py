"""Running the baseline workflows (``_workflows``) on their own worker."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from bench._model_request import ModelRequester
from bench._workflows import (
    BARE_LOOP,
    BASELINE_ACTIVITIES,
    CONVERSATION_LOOP,
    LOCAL_MODEL_LOOP,
    MODEL_LOOP,
    RESULT_LOOP,
    STORING_LOOP,
    BareLoop,
    ConversationLoop,
    LocalModelLoop,
    LoopInput,
    ModelLoop,
    ResultLoop,
    StoringLoop,
)
from psych_runtime.activities import Endpoint, LocalBlobStore
from psych_runtime.workers import PsychPlugin


@dataclass(frozen=True)
class BaselineRun:
    """One finished (or failed) baseline workflow."""

    workflow_id: str
    wall_ms: float
    failure: str | None = None
    """Why it did not complete, e.g. the server terminated it at its history size limit."""


def baseline_client(env: WorkflowEnvironment) -> Client:
    """A client of ``env``'s server for the baselines: the psych plugin's sandbox
    passthrough (so a sandboxed baseline does not import pydantic per Run) with the SDK's
    own pydantic data converter, as a hand-written loop has (``PsychPayloadConverter``,
    which the plugin installs otherwise, is the runtime's work, not the baseline's)."""
    return Client(
        env.client.service_client,
        namespace=env.client.namespace,
        plugins=[PsychPlugin()],
        data_converter=pydantic_data_converter,
    )


class BaselineBench:
    """Starts baseline workflows on one worker and times them."""

    def __init__(self, client: Client, task_queue: str, requester: ModelRequester | None) -> None:
        self.client = client
        self.task_queue = task_queue
        self._requester = requester

    @classmethod
    @contextlib.asynccontextmanager
    async def running(
        cls,
        env: WorkflowEnvironment,
        *,
        eager_activities: bool = True,
        model: Endpoint | None = None,
        sandbox: bool = True,
        blobs: LocalBlobStore | None = None,
    ) -> AsyncIterator[BaselineBench]:
        """A worker for the baseline workflows, for the block.

        ``eager_activities=False`` turns off eager activity dispatch, so every activity
        task also goes through the server's transfer queue (see bench/README.md).
        ``model`` (the fake model's endpoint) adds ``ModelLoop``'s model-request activity;
        ``learn`` gives it the bodies to send. ``sandbox=False`` runs the baselines
        unsandboxed, as psych's workers run AgentRun (docs/decisions/workers.md, "The workflow
        sandbox"). ``blobs`` (with ``model``) adds ``StoringLoop``'s activities, which keep
        its conversation there.
        """
        task_queue = f"bench-baseline-{uuid.uuid4().hex[:8]}"
        async with contextlib.AsyncExitStack() as stack:
            activities: list[Any] = list(BASELINE_ACTIVITIES)
            requester = None
            if model is not None:
                http = await stack.enter_async_context(httpx.AsyncClient())
                requester = ModelRequester(model, http, blobs)
                activities.append(requester.request)
                if blobs is not None:
                    activities += [requester.request_and_store, requester.tool_and_store]
            runner: WorkflowRunner = (
                SandboxedWorkflowRunner() if sandbox else UnsandboxedWorkflowRunner()
            )
            client = baseline_client(env)
            async with Worker(
                client,
                task_queue=task_queue,
                workflows=[
                    BareLoop,
                    ConversationLoop,
                    ResultLoop,
                    ModelLoop,
                    LocalModelLoop,
                    StoringLoop,
                ],
                activities=activities,
                disable_eager_activity_execution=not eager_activities,
                workflow_runner=runner,
            ):
                yield cls(client, task_queue, requester)

    async def _run(self, workflow: str, input: LoopInput, give_up_s: float) -> BaselineRun:
        workflow_id = f"bench-{uuid.uuid4().hex}"
        started = time.perf_counter()
        handle = await self.client.start_workflow(
            workflow, input, id=workflow_id, task_queue=self.task_queue, result_type=int
        )
        failure: str | None = None
        try:
            await asyncio.wait_for(handle.result(), give_up_s)
        except WorkflowFailureError as err:
            failure = f"{type(err.cause).__name__}: {err.cause}"
        except TimeoutError:
            failure = f"not finished after {give_up_s:g} s; terminated by the benchmark"
            await handle.terminate("benchmark timeout")
        return BaselineRun(workflow_id, (time.perf_counter() - started) * 1000, failure)

    async def _finished(self, workflow: str, input: LoopInput, what: str) -> BaselineRun:
        """``_run`` within 300 s; a failure raises, naming ``what`` failed."""
        run = await self._run(workflow, input, give_up_s=300)
        if run.failure:
            raise RuntimeError(f"{what} {run.workflow_id} failed: {run.failure}")
        return run

    async def bare(self, turns: int, *, tool: bool = True) -> BaselineRun:
        """One BareLoop of ``turns`` turns (model + tool activity, or model only)."""
        return await self._finished(BARE_LOOP, LoopInput(turns=turns, tool=tool), "bare loop")

    def learn(self, turns: int, bodies: list[dict[str, Any]]) -> None:
        """The request bodies ``turns``-turn ModelLoops send (``AgentBench.request_bodies``)."""
        if self._requester is None:
            raise RuntimeError("this baseline worker has no model: BaselineBench.running(model=)")
        self._requester.learn(turns, bodies)

    async def model_loop(self, turns: int, heartbeat_seconds: float | None = None) -> BaselineRun:
        """One ModelLoop of ``turns`` turns (a model request + a trivial tool activity;
        ``heartbeat_seconds``: the model activity's heartbeat timeout)."""
        return await self._finished(
            MODEL_LOOP, LoopInput(turns=turns, heartbeat_seconds=heartbeat_seconds), "model loop"
        )

    async def local_model_loop(
        self, turns: int, heartbeat_seconds: float | None = None
    ) -> BaselineRun:
        """One LocalModelLoop of ``turns`` turns (ModelLoop with its tool run locally;
        ``heartbeat_seconds`` as ``model_loop``'s)."""
        return await self._finished(
            LOCAL_MODEL_LOOP,
            LoopInput(turns=turns, heartbeat_seconds=heartbeat_seconds),
            "local model loop",
        )

    async def storing_loop(self, turns: int) -> BaselineRun:
        """One StoringLoop of ``turns`` turns (ModelLoop keeping its conversation by hand)."""
        return await self._finished(STORING_LOOP, LoopInput(turns=turns), "storing loop")

    async def results(self, turns: int, result_bytes: int) -> BaselineRun:
        """One ResultLoop: the bare loop whose tool returns ``result_bytes`` each turn."""
        return await self._finished(
            RESULT_LOOP, LoopInput(turns=turns, result_bytes=result_bytes), "result loop"
        )

    async def conversation(self, turns: int, result_bytes: int, give_up_s: float) -> BaselineRun:
        """One ConversationLoop; a failure (history too large) is returned, not raised."""
        return await self._run(
            CONVERSATION_LOOP,
            LoopInput(turns=turns, result_bytes=result_bytes),
            give_up_s=give_up_s,
        )

    def handle(self, workflow_id: str) -> WorkflowHandle[Any, Any]:
        """The Temporal handle of a baseline workflow."""
        return self.client.get_workflow_handle(workflow_id)
