"""A worker SIGKILLed between a person's consent and the retried call: the Run completes
on another worker.

A worker process runs an agent whose MCP server needs a person's consent; once the Run
is suspended for authorization the process is SIGKILLed. The person consents while no
worker runs: psych's callback leaves the code in the shared token store and its resume
waits for a worker. A worker in the test process takes over: it resumes the Run,
exchanges the code (the PKCE verifier was sealed in the store by the dead worker, never in
history), and the retried discovery and tool call succeed.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from psych_runtime.activities.tokens import LocalTokenStore
from psych_runtime.activities.versions import FileVersionStore
from psych_runtime.specs import AgentBuilder, McpOAuth, Scope
from psych_runtime.testing import FakeModel, Reply, ToolCall
from psych_runtime.workflows import PsychClient, RunStatus, SuspensionReason
from tests.mcp.consent_fixture import CLIENT, consenting, follow, record_files

from ._crash import doomed_worker
from ._waiting import is_waiting, only_pending, state_when

pytestmark = pytest.mark.e2e


async def test_the_run_completes_on_another_worker_after_consent(
    dev_env: WorkflowEnvironment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    task_queue = f"consent-crash-{uuid.uuid4().hex[:12]}"
    scope = Scope(tenant="acme", principal="crash")
    # Only resumes go through the callback's client.
    resumer = PsychClient(dev_env.client, store=FileVersionStore(tmp_path / "versions"))
    store = LocalTokenStore(tmp_path / "tokens")
    async with (
        FakeModel(models=("fake-model",)) as fake,
        consenting("streamable-http", resumer, store) as pair,
    ):
        # The worker process reads its issuers from its environment; so does the survivor.
        monkeypatch.setenv("PSYCH_MCP_OAUTH_ISSUERS", f"{CLIENT}={pair.server.issuer}")
        fake.enqueue(Reply.tool_calls(ToolCall("crm__whoami", {})), Reply.text("done"))
        async with doomed_worker(dev_env.client, task_queue, tmp_path, fake.base_url) as doomed:
            spec = (
                AgentBuilder("consent-crash")
                .model("fake-model")
                .mcp_server(
                    "crm",
                    pair.server.url,
                    oauth=McpOAuth(
                        grant="authorization_code",
                        preregistered_client_id=CLIENT,
                        redirect_uris=(pair.callback_url,),
                    ),
                )
                .build()
            )
            run = await doomed.psych.dispatch(spec, "who am I?", scope=scope)
            state = await state_when(
                doomed.psych, run, scope, is_waiting, what="consent", within=60
            )
            item = only_pending(state)
            assert item.reason is SuspensionReason.AUTHORIZATION
            await doomed.kill_when(lambda: True)
            # The person consents while no worker runs: the callback's resume waits.
            assert item.question is not None
            page = asyncio.create_task(follow(item.question))
            async with doomed.survivor():
                answered = await asyncio.wait_for(page, timeout=90)
                result = await asyncio.wait_for(doomed.psych.result(run, scope=scope), timeout=90)
                report = await doomed.psych.report(run, scope=scope)
        state_of_server = pair.server.state()
    assert answered.status_code == 200, answered.text
    assert result.status is RunStatus.COMPLETED, result.reason
    assert [call.result for call in report.tool_calls] == [CLIENT]
    assert state_of_server["calls"]["whoami"] == 1
    # The flow the dead worker parked was exchanged and forgotten: one token record left.
    assert len(record_files(tmp_path / "tokens")) == 1
