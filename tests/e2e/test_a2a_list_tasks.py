"""A2A ListTasks pages through the Run listing, driven by ``a2a-sdk``'s own client against
``psych serve`` on loopback and the session's dev server: every task once across pages,
each status filter (read by Temporal's visibility query where one filter says it, else
filtered after reading, a bounded number of Runs a request), ``totalSize`` as counted,
page tokens refused when forged, cut, an old offset, or made for another listing, and a
``contextId`` answering its one task."""

from __future__ import annotations

import asyncio
import base64
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from a2a.client import Client
from a2a.types import ListTasksRequest, ListTasksResponse, TaskState
from a2a.utils.errors import InternalError, InvalidParamsError
from google.protobuf.json_format import MessageToDict
from google.protobuf.timestamp_pb2 import Timestamp
from temporalio.client import WorkflowExecutionStatus
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus

from ._listing import started_runs
from ._serve import ACME, GLOBEX, served
from ._waiting import eventually
from .conftest import Harness
from .test_a2a_serve import a2a_client, collect, user

pytestmark = pytest.mark.e2e

WORKING = TaskState.TASK_STATE_WORKING
INPUT_REQUIRED = TaskState.TASK_STATE_INPUT_REQUIRED
COMPLETED = TaskState.TASK_STATE_COMPLETED
FAILED = TaskState.TASK_STATE_FAILED
CANCELED = TaskState.TASK_STATE_CANCELED

# What each Run's search attributes say (oldest first), and the task state it lists as.
RUNS: list[tuple[tuple[str, str | None], TaskState]] = [
    (("completed", None), COMPLETED),
    (("running", None), WORKING),
    (("failed", None), FAILED),
    (("suspended", "question"), INPUT_REQUIRED),
    (("aborted", None), CANCELED),
    (("suspended", "external"), WORKING),
    (("stopped", None), FAILED),
    # Two reasons at once (a question and an approval of parallel calls): input-required.
    (("suspended", "approval,question"), INPUT_REQUIRED),
    (("running", None), WORKING),
    (("abandoned", None), FAILED),
    (("suspended", "children"), WORKING),
    (("completed", None), COMPLETED),
    (("running", None), WORKING),
]


async def walk(
    client: Client,
    size: int,
    status: TaskState = TaskState.TASK_STATE_UNSPECIFIED,
    token: str = "",
) -> tuple[list[ListTasksResponse], list[str]]:
    """Every page of ListTasks with ``status`` and ``size`` (from ``token`` on), following
    nextPageToken; the pages, and the task ids of all of them in order."""
    pages: list[ListTasksResponse] = []
    while True:
        request = ListTasksRequest(page_size=size, status=status, page_token=token)
        page = await client.list_tasks(request)
        assert len(page.tasks) <= size
        assert page.page_size == size
        pages.append(page)
        token = page.next_page_token
        if not token:
            return pages, [task.id for page in pages for task in page.tasks]


async def test_list_tasks_pages_by_cursor_and_filters_by_status(harness: Harness) -> None:
    agent = f"a2a_lister{uuid.uuid4().hex[:8]}"
    elsewhere = f"a2a_elsewhere{uuid.uuid4().hex[:8]}"
    for name in (agent, elsewhere):
        harness.client.publish(AgentBuilder(name).model("fake-model").build())
    shown = [attributes for attributes, _ in RUNS]
    async with (
        started_runs(harness, harness.scope.tenant, agent, len(RUNS), shown) as ids,
        started_runs(harness, "globex", agent, 1) as theirs,
    ):
        newest_first = [workflow_id.split("-", 2)[2] for workflow_id in ids[::-1]]
        state_of = dict(zip(newest_first, [state for _, state in RUNS][::-1], strict=True))

        def having(state: TaskState) -> list[str]:
            return [task for task in newest_first if state_of[task] == state]

        # At most 3 Runs looked at a request: short pages (even empty ones) that still go
        # on, and together every task once. (No worker polls these Runs: a query timeout
        # of 1 s, as an input-required task's state is read and cannot be.)
        async with (
            served(harness, query_timeout_seconds=1, a2a_list_scan=3) as base,
            a2a_client(base, agent, ACME, streaming=False) as client,
        ):
            pages, listed = await walk(client, 2, WORKING)
            assert [len(page.tasks) for page in pages] == [2, 1, 1, 1, 0]
            assert listed == having(WORKING)
            # Pages that fill halfway through what the listing answered go on from there.
            pages, listed = await walk(client, 1, FAILED)
            assert listed == having(FAILED)
            assert [len(page.tasks) for page in pages] == [0, 1, 0, 1, 0, 1, 0, 0]
            assert {page.total_size for page in pages} == {len(having(FAILED))}
            pages, listed = await walk(client, 2)
            assert listed == newest_first
            # The bound holds whatever the filter: a page of an exact one (here none)
            # asking for more than 3 ends after 3 Runs, and goes on.
            pages, listed = await walk(client, 4)
            assert [len(page.tasks) for page in pages] == [3, 3, 3, 3, 1]
            assert listed == newest_first

        async with (
            served(harness, query_timeout_seconds=1) as base,
            a2a_client(base, agent, ACME, streaming=False) as client,
        ):
            # Every task once, newest first, page after page; each page counts them all.
            pages, listed = await walk(client, 4)
            assert [len(page.tasks) for page in pages] == [4, 4, 4, 1]
            assert listed == newest_first
            assert {page.total_size for page in pages} == {len(RUNS)}
            assert {task.id: task.status.state for p in pages for task in p.tasks} == state_of
            assert all(task.context_id == task.id for p in pages for task in p.tasks)
            # An input-required task's question is read as GetTask reads it; with no worker
            # it cannot be, which its message says, and the page is answered all the same.
            asking = [t for p in pages for t in p.tasks if t.status.state == INPUT_REQUIRED]
            assert len(asking) == len(having(INPUT_REQUIRED)) == 2
            for task in asking:
                said = task.status.message.parts[0].text
                assert "what it asks could not be read now" in said, said
                unread = MessageToDict(task.status.message.parts[1].data)["unread"]
                assert unread["type"] == "urn:psych:problem:no-worker", unread

            # Each status: its tasks only, every one once, and how many there are.
            for state in (COMPLETED, CANCELED, INPUT_REQUIRED, WORKING, FAILED):
                pages, listed = await walk(client, 2, state)
                assert listed == having(state), TaskState.Name(state)
                assert {page.total_size for page in pages} == {len(having(state))}
            pages, listed = await walk(client, 2, TaskState.TASK_STATE_REJECTED)
            assert (listed, pages[0].total_size) == ([], 0)

            first = await client.list_tasks(ListTasksRequest(page_size=4))
            working = await client.list_tasks(ListTasksRequest(page_size=1, status=WORKING))
            token, working_token = first.next_page_token, working.next_page_token
            assert token and working_token

            async def refused(request: ListTasksRequest, words: str, who: Client = client) -> None:
                with pytest.raises(InvalidParamsError, match=words):
                    await who.list_tasks(request)

            # Made for another status filter: refused, even where the listing beneath is
            # the same (working and failed both read the agent's whole listing).
            await refused(
                ListTasksRequest(page_token=token, status=COMPLETED),
                "given for ListTasks with status any, not TASK_STATE_COMPLETED",
            )
            await refused(
                ListTasksRequest(page_token=working_token, status=FAILED),
                "status TASK_STATE_WORKING, not TASK_STATE_FAILED",
            )
            # Forged, edited, cut short: damaged; an offset (older servers' tokens): said so.
            payload, _, check = token.rpartition(".")
            data = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
            edited = base64.urlsafe_b64encode(data.replace(b'"v":2', b'"v":3')).decode()
            for forged in ("nonsense", token[:-1], token[:30], f"{edited.rstrip('=')}.{check}"):
                await refused(ListTasksRequest(page_token=forged), "damaged or is not one")
            await refused(ListTasksRequest(page_token="4"), "'4' is an offset")
            # A listing by contextId is one page: no token continues it.
            await refused(
                ListTasksRequest(page_token=token, context_id=newest_first[0]), "one page"
            )
            # Another agent's ListTasks with this one's token.
            async with a2a_client(base, elsewhere, ACME, streaming=False) as other:
                await refused(
                    ListTasksRequest(page_token=token), f"given by agent '{agent}'", who=other
                )
            # Another tenant's caller with acme's token: refused (the token is bound to the
            # tenant, as the cursor it holds is); its own listing holds its own task only.
            async with a2a_client(base, agent, GLOBEX, streaming=False) as globex:
                await refused(
                    ListTasksRequest(page_token=token), "another tenant's ListTasks", who=globex
                )
                # Also a token that holds no cursor (a page that ended halfway through the
                # listing's first chunk): bound to the tenant all the same.
                await refused(
                    ListTasksRequest(page_token=working_token, status=WORKING),
                    "another tenant's",
                    who=globex,
                )
                mine = await globex.list_tasks(ListTasksRequest())
                assert [task.id for task in mine.tasks] == [theirs[0].split("-", 2)[2]]

            # A page that ended halfway through what the listing answered goes on after
            # the task it ended on, even when a task started since comes first in the
            # listing (newest first): none is shown twice.
            first = await client.list_tasks(ListTasksRequest(page_size=1, status=FAILED))
            assert [task.id for task in first.tasks] == having(FAILED)[:1]
            async with started_runs(harness, harness.scope.tenant, agent, 1, first=len(RUNS)):
                _, rest = await walk(client, 1, FAILED, first.next_page_token)
            assert rest == having(FAILED)[1:]


async def test_list_tasks_goes_on_where_the_page_ended_when_its_last_task_ends(
    harness: Harness,
) -> None:
    """The task a page ended on ends before the next page is read: its Run moves behind
    the open Runs (Temporal orders closed Runs after them), and the next page goes on
    where the page ended, not after the Run's new place: no other task is skipped."""
    agent = f"a2a_moved{uuid.uuid4().hex[:8]}"
    harness.client.publish(AgentBuilder(agent).model("fake-model").build())
    async with started_runs(harness, harness.scope.tenant, agent, 4) as older:
        older_first = [workflow_id.split("-", 2)[2] for workflow_id in older[::-1]]
        async with (
            served(harness) as base,
            a2a_client(base, agent, ACME, streaming=False) as client,
        ):
            async with started_runs(harness, harness.scope.tenant, agent, 1, first=4) as new:
                first = await client.list_tasks(ListTasksRequest(page_size=1, status=WORKING))
                assert [task.id for task in first.tasks] == [new[0].split("-", 2)[2]]
            # Leaving the block ended that Run (terminated): once visibility holds it closed,
            # it comes after the four open Runs.
            query = f"PsychAgent = '{agent}' AND ExecutionStatus = 'Running'"

            async def closed() -> bool:
                return (await harness.env.client.count_workflows(query)).count == 4

            await eventually(closed, what="the newest Run closed in visibility")
            _, rest = await walk(client, 1, WORKING, first.next_page_token)
            assert rest[:4] == older_first


async def test_list_tasks_by_context_id_answers_that_one_task(harness: Harness) -> None:
    agent = f"a2a_context{uuid.uuid4().hex[:8]}"
    harness.client.publish(AgentBuilder(agent).model("fake-model").build())
    harness.fake.enqueue(Reply.text("Done."))
    async with (
        harness.worker(),
        served(harness) as base,
        a2a_client(base, agent, ACME, streaming=False) as client,
    ):
        (sent,) = await collect(client.send_message(user("go")))
        task_id = sent.task.id
        assert sent.task.status.state == COMPLETED
        listed = await client.list_tasks(ListTasksRequest(context_id=task_id))
        assert [(t.id, t.context_id, t.status.state) for t in listed.tasks] == [
            (task_id, task_id, COMPLETED)
        ]
        assert (listed.total_size, listed.next_page_token) == (1, "")
        other = await client.list_tasks(ListTasksRequest(context_id=task_id, status=WORKING))
        assert (list(other.tasks), other.total_size) == ([], 0)
        # A filter this server cannot apply is refused, not ignored: every task would be
        # listed as if it had changed since (visibility holds no last status change).
        since = Timestamp()
        since.FromDatetime(datetime.now(UTC) + timedelta(days=1))
        for request in (
            ListTasksRequest(status_timestamp_after=since),
            ListTasksRequest(status_timestamp_after=since, context_id=task_id),
        ):
            with pytest.raises(InvalidParamsError, match="statusTimestampAfter"):
                await client.list_tasks(request)
        unknown = await client.list_tasks(ListTasksRequest(context_id="no-such-task"))
        assert list(unknown.tasks) == []
        async with a2a_client(base, agent, GLOBEX, streaming=False) as globex:
            theirs = await globex.list_tasks(ListTasksRequest(context_id=task_id))
            assert list(theirs.tasks) == []


async def test_a_task_that_continued_as_new_is_listed_once(harness: Harness) -> None:
    """A long Run goes on as a new execution under its workflow id (continue-as-new);
    visibility holds every execution, but the task is one: listed and counted once."""

    @harness.registry.register
    def step(n: int) -> str:
        """One step."""
        return f"step {n} done"

    agent = f"a2a_continued{uuid.uuid4().hex[:8]}"
    spec = AgentBuilder(agent, registry=harness.registry).model("fake-model").tool("step").build()
    harness.client.publish(spec)
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("step", {"n": 1})),
        Reply.tool_calls(ToolCall("step", {"n": 2})),
        Reply.text("done"),
    )
    async with harness.worker():
        run = await harness.client.dispatch(
            spec, "two steps", scope=harness.scope, continue_after_events=1
        )
        result = await harness.client.result(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    executions = f"WorkflowId = '{run.workflow_id}'"

    async def indexed() -> bool:
        closed = await harness.env.client.count_workflows(
            f"{executions} AND ExecutionStatus = 'Completed'"
        )
        return closed.count == 1

    await eventually(indexed, what="the last execution closed in visibility")
    assert (await harness.env.client.count_workflows(executions)).count > 1
    async with (
        served(harness) as base,
        a2a_client(base, agent, ACME, streaming=False) as client,
    ):
        for status in (TaskState.TASK_STATE_UNSPECIFIED, COMPLETED):
            pages, listed = await walk(client, 1, status)
            assert listed == [run.run_id], TaskState.Name(status)
            assert {page.total_size for page in pages} == {1}


async def test_a_page_size_out_of_range_is_refused_naming_the_bound(harness: Harness) -> None:
    # An explicit pageSize 0 was taken for a left-out one (the default, 50): A2A and
    # a2a-sdk's own servers refuse it, as they refuse any size out of 1 to 100.
    agent = f"a2a_sizes{uuid.uuid4().hex[:8]}"
    harness.client.publish(AgentBuilder(agent).model("fake-model").build())
    async with (
        served(harness) as base,
        a2a_client(base, agent, ACME, streaming=False) as client,
    ):
        for size in (0, -1, 101):
            with pytest.raises(InvalidParamsError) as refused:
                await client.list_tasks(ListTasksRequest(page_size=size))
            assert str(refused.value) == (
                f"pageSize {size} is out of range: it must be 1 to 100, or left out for 50"
            )
        left_out = await client.list_tasks(ListTasksRequest())
        assert (left_out.page_size, list(left_out.tasks)) == (50, [])


async def test_list_tasks_with_include_artifacts_gives_ended_tasks_their_answers(
    harness: Harness,
) -> None:
    # includeArtifacts was ignored: a caller that asked for the tasks' answers got every
    # task without its artifacts, as if none had answered.
    agent = f"a2a_answers{uuid.uuid4().hex[:8]}"
    harness.client.publish(AgentBuilder(agent).model("fake-model").build())
    harness.fake.enqueue(Reply.text("First answer."), Reply.error(400), Reply.text("Second."))
    async with (
        harness.worker(),
        served(harness) as base,
        a2a_client(base, agent, ACME, streaming=False) as client,
    ):
        ids: list[str] = []
        for text in ("one", "two", "three"):
            (sent,) = await collect(client.send_message(user(text)))
            ids.append(sent.task.id)

        def answers(page: ListTasksResponse) -> dict[str, list[tuple[str, str]]]:
            return {
                task.id: [(a.name, part.text) for a in task.artifacts for part in a.parts]
                for task in page.tasks
            }

        plain = await client.list_tasks(ListTasksRequest())
        assert answers(plain) == {task_id: [] for task_id in ids}
        full = await client.list_tasks(ListTasksRequest(include_artifacts=True))
        assert [task.status.state for task in full.tasks] == [COMPLETED, FAILED, COMPLETED]
        assert answers(full) == {
            ids[0]: [("answer", "First answer.")],
            ids[1]: [],  # failed: no answer
            ids[2]: [("answer", "Second.")],
        }
        # The same through a filter and by contextId (the task as GetTask reads it).
        done = await client.list_tasks(ListTasksRequest(status=COMPLETED, include_artifacts=True))
        assert answers(done) == {ids[2]: [("answer", "Second.")], ids[0]: answers(full)[ids[0]]}
        by_context = ListTasksRequest(context_id=ids[0], include_artifacts=True)
        assert answers(await client.list_tasks(by_context)) == {
            ids[0]: [("answer", "First answer.")]
        }
        plain_one = await client.list_tasks(ListTasksRequest(context_id=ids[0]))
        assert answers(plain_one) == {ids[0]: []}


async def test_an_answer_that_cannot_be_read_fails_the_page_naming_its_task(
    harness: Harness,
) -> None:
    # A Run shown completed whose workflow an operator then terminated (its result is the
    # termination): the page failed with "unhandled errors in a TaskGroup (1
    # sub-exception)", naming neither the task nor why.
    agent = f"a2a_unread{uuid.uuid4().hex[:8]}"
    harness.client.publish(AgentBuilder(agent).model("fake-model").build())
    tenant = harness.scope.tenant
    workflow_id = f"psych-{tenant}-{agent}-0"
    attributes = [
        SearchAttributePair(SearchAttributeKey.for_keyword(name), value)
        for name, value in (
            ("PsychTenant", tenant),
            ("PsychAgent", agent),
            ("PsychStatus", "completed"),
        )
    ]
    started = await harness.env.client.start_workflow(
        "AgentRun",
        id=workflow_id,
        task_queue=f"nobody-{agent}",
        search_attributes=TypedSearchAttributes(attributes),
    )
    await started.terminate("cut off")
    closed = f"WorkflowId = '{workflow_id}' AND ExecutionStatus = 'Terminated'"

    async def indexed() -> bool:
        return (await harness.env.client.count_workflows(closed)).count == 1

    await eventually(indexed, what="the terminated execution in visibility")
    async with (
        served(harness) as base,
        a2a_client(base, agent, ACME, streaming=False) as client,
    ):
        with pytest.raises(InternalError) as failed:
            await client.list_tasks(ListTasksRequest(include_artifacts=True))
    task_id = workflow_id.split("-", 2)[2]
    assert f"the answer of task {task_id} could not be read: " in failed.value.message
    assert "terminated" in failed.value.message


@pytest.mark.timeout(60)
async def test_an_ended_task_whose_workflow_is_still_open_is_read_without_waiting_for_it(
    harness: Harness,
) -> None:
    # A Run shows its terminal status before its workflow closes (the next Runs start in
    # between; a worker lost there leaves it open until another takes it): the page waited
    # for the workflow's result as long as it stayed open. Its state is read instead, as
    # GetTask reads it, within the serve's query timeout; here no worker answers.
    agent = f"a2a_open{uuid.uuid4().hex[:8]}"
    harness.client.publish(AgentBuilder(agent).model("fake-model").build())
    async with (
        started_runs(harness, harness.scope.tenant, agent, 1, [("completed", None)]) as ids,
        served(harness, query_timeout_seconds=1) as base,
        a2a_client(base, agent, ACME, streaming=False) as client,
    ):
        task_id = ids[0].split("-", 2)[2]
        with pytest.raises(InternalError) as failed:
            async with asyncio.timeout(20):
                await client.list_tasks(ListTasksRequest(include_artifacts=True))
    assert f"the answer of task {task_id} could not be read: " in failed.value.message


@pytest.mark.timeout(60)
async def test_a_task_whose_workflow_was_cancelled_is_read_within_the_query_timeout(
    harness: Harness,
) -> None:
    # A Run whose workflow Temporal cancelled (not aborted through psych) has its answer
    # in its state, not its close event: it was read through PsychClient.result, whose
    # query waits CANCELLED_STATE_TIMEOUT (10 s), not the serve's, for a worker: with
    # none, a page of such tasks took up to ~130 s (8 at a time).
    agent = f"a2a_cancelled{uuid.uuid4().hex[:8]}"
    version = harness.client.publish(AgentBuilder(agent).model("fake-model").build())
    harness.fake.enqueue(Reply.stall(30, after_chunks=1))
    async with harness.worker():
        run = await harness.client.dispatch(version, "hi", scope=harness.scope)

        async def calling() -> bool:
            return len(harness.fake.requests) == 1

        await eventually(calling, what="the model call")
        handle = harness.env.client.get_workflow_handle(run.workflow_id)
        await handle.cancel()

        async def closed() -> bool:
            return (await handle.describe()).status is WorkflowExecutionStatus.CANCELED

        await eventually(closed, what="the workflow to end cancelled")
    listed = f"WorkflowId = '{run.workflow_id}' AND ExecutionStatus = 'Canceled'"

    async def indexed() -> bool:
        return (await harness.env.client.count_workflows(listed)).count == 1

    await eventually(indexed, what="the cancelled execution in visibility")
    # No worker polls now: its state cannot be read, within the serve's 1 s.
    async with (
        served(harness, query_timeout_seconds=1) as base,
        a2a_client(base, agent, ACME, streaming=False) as client,
    ):
        plain = await client.list_tasks(ListTasksRequest())
        assert [(t.id, t.status.state) for t in plain.tasks] == [(run.run_id, CANCELED)]
        with pytest.raises(InternalError) as failed:
            # Well under CANCELLED_STATE_TIMEOUT (10 s), well over the serve's 1 s.
            async with asyncio.timeout(6):
                await client.list_tasks(ListTasksRequest(include_artifacts=True))
    assert f"the answer of task {run.run_id} could not be read: " in failed.value.message
    assert "was cancelled; what it settled with could not be read" in failed.value.message
