"""Record the replay gate's histories: one real Run of every AgentRun and WorkflowRun shape.

    python -m tests.workflows.record_histories                 # shapes without a history
    python -m tests.workflows.record_histories --overwrite NAME [NAME ...]
    python -m tests.workflows.record_histories --list

Each shape is a real Run on a real server: the embedded dev server (``start_dev_server``)
with the fake model, loopback HTTP APIs and in-process workers; a worker process killed
with SIGKILL for the crash shapes; the time-skipping test server for the deadline shapes
and the expired approval. Its history is fetched and written to ``histories/<name>.json``
(``WorkflowHistory.to_json``, the format ``temporal workflow show --output json`` prints).
``test_replay.py`` replays them all against the current AgentRun and WorkflowRun (a
workflow's history is its own; its steps' child Runs have histories of their own).

Existing histories are never overwritten unless named with ``--overwrite``: a change to
AgentRun that breaks the replay of a committed history must be patched, not re-recorded
(histories/README.md, "Compatibility policy").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import hashlib
import os
import re
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from temporalio.client import WorkflowExecutionStatus, WorkflowHistory
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from psych_runtime.activities import Deny, HookCall, Hooks
from psych_runtime.activities.a2a import A2aSettings
from psych_runtime.activities.blobs import LocalBlobStore
from psych_runtime.activities.contract import PolicyDecision, ToolInfo
from psych_runtime.activities.mcp import McpSettings
from psych_runtime.activities.model import (
    ContextRequest,
    ContextSettings,
    ContextSource,
    Endpoint,
    ModelEndpoints,
)
from psych_runtime.activities.tokens import LocalTokenStore
from psych_runtime.activities.tools import RulePolicy
from psych_runtime.activities.versions import FileVersionStore
from psych_runtime.specs import (
    AgentBuilder,
    AgentSpec,
    ExternalWait,
    PermitSource,
    RunFailed,
    Scope,
    ToolRegistry,
    Version,
    WorkflowBuilder,
    WorkflowSpec,
)
from psych_runtime.testing import FakeModel, Reply, ToolCall
from psych_runtime.testing import Usage as FakeUsage
from psych_runtime.workers import (
    WorkerSettings,
    run_worker,
    start_dev_server,
    start_time_skipping_server,
)
from psych_runtime.workflows import (
    AGENT_RUN,
    RESUME,
    STEER,
    AgentRunInput,
    NextRunStarted,
    Pending,
    PsychClient,
    ResumeInput,
    RunHandle,
    RunStatus,
    SteerInput,
    workflow_id_for,
)
from tests.a2a.peer import serve_peer
from tests.a2a.served import serve_app
from tests.e2e._http_server import CountingServer, refund_tool
from tests.e2e._local_split import polled_from_dispatch, resolved_after_its_marker
from tests.e2e._time_skipping import until_settled
from tests.e2e._worker_proc import REGISTRY, spawn
from tests.mcp.fixture import McpTestServer, Transport, start_mcp_server
from tests.mcp.modern_fixture import start_modern_server
from tests.workflows import _consent_shapes as consent_shapes

# The shapes' HTTP, MCP and A2A servers run on loopback, which a Spec's URL may reach only
# when the operator allows it (as tests/conftest.py allows it for the suite).
os.environ.setdefault("PSYCH_EGRESS_ALLOW", "127.0.0.0/8,::1/128,localhost")

HISTORIES = Path(__file__).resolve().parent / "histories"
SCOPE = Scope(tenant="acme", principal="recorder")
MODELS = ("fake-model", "fake-fallback")

Server = Literal["dev", "time-skipping"]


# --- tools --------------------------------------------------------------------------------

TOOLS = ToolRegistry()
TOOLS.register(REGISTRY.get("lookup_order").fn)


@TOOLS.register
def flaky(x: int) -> str:
    """A tool that always fails.

    Args:
        x: Anything.
    """
    raise ValueError(f"cannot handle {x}")


@TOOLS.register
def inventory() -> str:
    """The whole inventory, as one long text."""
    return INVENTORY


@TOOLS.register
async def pause(seconds: float) -> str:
    """Wait, then say so.

    Args:
        seconds: How long to wait.
    """
    await asyncio.sleep(seconds)
    return f"waited {seconds:g} s"


@TOOLS.register(destructive=True)
def delete_order(order_id: str) -> str:
    """Delete an order for good (the suspension shapes' Policy asks before it runs).

    Args:
        order_id: The order's id.
    """
    return f"order {order_id} deleted"


@TOOLS.register(idempotent=True, read_only=True, local_seconds=5.0)
def long_text(letter: str, size: int) -> str:
    """A text of one letter repeated (a local activity: the outputs' bound is checked
    after its resolution, which is why its patch is asked at the Run's start).

    Args:
        letter: The letter.
        size: How many times.
    """
    return letter * size


@TOOLS.register
def count_orders(customer: str) -> str:
    """How many orders a customer has, as text.

    Args:
        customer: The customer's name.
    """
    return "42"


@TOOLS.register
def request_payment(order_id: str) -> ExternalWait:
    """Ask the payment provider to charge an order; it calls back when done.

    Args:
        order_id: The order's id.
    """
    return ExternalWait(token=f"pay-{order_id}", message="waiting for the payment webhook")


@TOOLS.register(idempotent=True, read_only=True, local_seconds=5.0)
async def count_stock(item: str, seconds: float) -> str:
    """Count an item's stock (a quick read: run as a local activity).

    Args:
        item: The item.
        seconds: How long the count takes.
    """
    await asyncio.sleep(seconds)
    return f"{item}: 7 in stock"


@TOOLS.register(idempotent=True, local_seconds=0.3)
async def slow_count(item: str) -> str:
    """Count an item's stock, taking longer than its local_seconds allow.

    Args:
        item: The item.
    """
    await asyncio.sleep(2.0)
    return f"{item}: 7 in stock"


@TOOLS.register(idempotent=True, local_seconds=5.0)
def hold_slot(slot: str) -> ExternalWait:
    """Hold a delivery slot; the carrier confirms it later (a local call that waits).

    Args:
        slot: The slot.
    """
    return ExternalWait(token=f"slot-{slot}", message="waiting for the carrier")


@dataclass
class Gate:
    """Lets a scenario see a tool call start, and decide when it may finish."""

    started: asyncio.Event = field(default_factory=asyncio.Event)
    open: asyncio.Event = field(default_factory=asyncio.Event)


GATES: dict[str, Gate] = {}
"""Gates of the gated tools below, by tool name; a scenario using them clears it first."""


async def _through_gate(name: str) -> None:
    gate = GATES.setdefault(name, Gate())
    gate.started.set()
    await gate.open.wait()


@TOOLS.register
async def fetch(item: str) -> str:
    """Fetch an item's price.

    Args:
        item: The item.
    """
    await _through_gate("fetch")
    return f"{item}: 12 USD"


@TOOLS.register
async def request_payment_later(order_id: str) -> ExternalWait:
    """Ask the payment provider to charge an order, once its gate opens; it calls back.

    Args:
        order_id: The order's id.
    """
    await _through_gate("request_payment_later")
    return ExternalWait(token=f"pay-{order_id}", message="waiting for the payment webhook")


@TOOLS.register
async def search(query: str) -> str:
    """Search (slowly; its gate never opens, so only an abort ends it).

    Args:
        query: What to look for.
    """
    await _through_gate("search")
    return "found"


TALLIES: list[str] = []
"""Every ``tally_stock`` call that ran, across the scenarios (each tally another result)."""


@TOOLS.register
async def tally_stock(item: str) -> str:
    """Tally an item's stock, once its gate opens (each tally another result).

    Args:
        item: The item.
    """
    TALLIES.append(item)
    number = len(TALLIES)
    await _through_gate("tally_stock")
    return f"{item}: tally {number}"


@TOOLS.register
async def write_record(record: str) -> str:
    """Write a record, which must not be cut off halfway (registered non-interruptible
    by the Specs that use it).

    Args:
        record: What to write.
    """
    await _through_gate("write_record")
    return "written"


INVENTORY = "".join(f"item {n:03d}: {n * 7 % 50} in stock\n" for n in range(40))
INVENTORY_REF = "sha256:" + hashlib.sha256(INVENTORY.encode()).hexdigest()


# --- the rig ------------------------------------------------------------------------------


@dataclass
class Rig:
    """One scenario's fake model, client and worker wiring, on one server."""

    env: WorkflowEnvironment
    server: Server
    client: PsychClient
    fake: FakeModel
    settings: WorkerSettings
    home: Path

    def worker(self) -> contextlib.AbstractAsyncContextManager[Worker]:
        return run_worker(self.env.client, self.settings)

    def agent(self, name: str) -> AgentBuilder:
        return AgentBuilder(name, registry=TOOLS).model("fake-model")

    async def settle(self, run: RunHandle) -> None:
        """Wait until the Run settles (FAILED included)."""
        async with asyncio.timeout(120):
            if self.server == "time-skipping":
                await until_settled(self.env, self.client, run, SCOPE)
                return
            with contextlib.suppress(RunFailed):
                await self.client.result(run, scope=SCOPE)

    async def until(self, check: Callable[[], Awaitable[bool]], what: str) -> None:
        try:
            async with asyncio.timeout(30):
                while True:
                    if await check():
                        return
                    await asyncio.sleep(0.05)
        except TimeoutError:
            raise RuntimeError(f"timed out waiting for {what}") from None

    async def suspended(self, run: RunHandle) -> Pending:
        """Wait until the Run is suspended on one item; return it."""
        pending: list[Pending] = []

        async def check() -> bool:
            state = await self.client.status(run, scope=SCOPE)
            pending[:] = state.pending
            return state.status is RunStatus.SUSPENDED and bool(pending)

        await self.until(check, "the Run to suspend")
        (item,) = pending
        return item

    async def started(self, tool: str) -> Gate:
        """Wait until the gated ``tool`` is running; return its gate."""
        gate = GATES.setdefault(tool, Gate())
        async with asyncio.timeout(30):
            await gate.started.wait()
        return gate

    async def run(self, spec: AgentSpec | WorkflowSpec, text: str = "Hello") -> RunHandle:
        """Dispatch ``spec`` with a worker running, and wait until it settles."""
        async with self.worker():
            run = await self.client.dispatch(spec, text, scope=SCOPE)
            await self.settle(run)
        return run


@asynccontextmanager
async def rig(env: WorkflowEnvironment, server: Server, home: Path) -> AsyncIterator[Rig]:
    task_queue = f"record-{uuid.uuid4().hex[:12]}"
    async with FakeModel(models=MODELS) as fake:
        yield Rig(
            env=env,
            server=server,
            client=PsychClient(
                env.client,
                store=FileVersionStore(home / "versions"),
                task_queue=task_queue,
                registry=TOOLS,
                search_attributes=server == "dev",
            ),
            fake=fake,
            settings=WorkerSettings(
                task_queue=task_queue,
                registry=TOOLS,
                blobs=LocalBlobStore(home / "blobs"),
                endpoints=ModelEndpoints(default=Endpoint(base_url=fake.base_url, api_key="k")),
            ),
            home=home,
        )


# --- the shapes ---------------------------------------------------------------------------


async def plain_answer(rig: Rig) -> RunHandle:
    rig.fake.enqueue(Reply.text("Hello! How can I help?"))
    return await rig.run(rig.agent("greeter").instructions("Greet.").build())


async def answer_cut_off_before_patch(rig: Rig) -> RunHandle:
    """A final answer the model cut at its output limit (``finish_reason: length``),
    recorded before psych-cut-answer-named: the Run completed as "answered"."""
    rig.fake.enqueue(Reply.text("The three steps are: first, open the", cut_off=True))
    return await rig.run(rig.agent("greeter").instructions("Explain.").build())


async def answer_cut_off(rig: Rig) -> RunHandle:
    """The same, behind psych-cut-answer-named: the Run's reason names the cut."""
    return await answer_cut_off_before_patch(rig)


async def answer_cut_off_stopped_before_patch(rig: Rig) -> RunHandle:
    """A final answer cut at the model's output limit in the last turn ``max_turns`` allows,
    with a follow-up waiting for it (sent while the turn before's tool ran): the Run stops
    STOPPED keeping the cut answer, recorded before psych-cut-answer-stopped-named: its
    reason says only ``max_turns``."""
    GATES.clear()
    spec = rig.agent("shop").tool("fetch").limits(max_turns=2).build()
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("fetch", {"item": "book"})),
        Reply.text("The book costs 11 EUR and ships", cut_off=True),
    )
    async with rig.worker():
        run = await rig.client.dispatch(spec, "Price of the book?", scope=SCOPE)
        gate = await rig.started("fetch")
        await rig.client.steer(run, "And shipping?", scope=SCOPE, mode="follow_up")
        gate.open.set()
        await rig.settle(run)
    return run


async def answer_cut_off_stopped(rig: Rig) -> RunHandle:
    """The same, behind psych-cut-answer-stopped-named: the reason names the cut too."""
    return await answer_cut_off_stopped_before_patch(rig)


async def workflow_step_cut_off_before_patch(rig: Rig) -> RunHandle:
    """A workflow's agent step whose answer is cut at the model's output limit; the next
    agent step reads it. Recorded before psych-workflow-cut-step-named: completed, its
    reason "completed: 2 steps"."""
    spec = (
        _workflow(rig, "drafting")
        .agent_step("draft", rig.agent("drafter").instructions("Draft.").build())
        .agent_step("review", rig.agent("reviewer").instructions("Review.").build())
        .build()
    )
    rig.fake.enqueue(
        Reply.text("Dear Ada, your order", cut_off=True), Reply.text("The draft stops short.")
    )
    return await rig.run(spec, "Write to Ada")


async def workflow_step_cut_off(rig: Rig) -> RunHandle:
    """The same, behind psych-workflow-cut-step-named (its marker as the first step's
    child ends): the Run's reason names the cut step."""
    return await workflow_step_cut_off_before_patch(rig)


async def _refund_support(rig: Rig, *replies: Reply) -> RunHandle:
    """The support agent (``lookup_order`` and an HTTP POST ``refund`` tool) on a loopback
    API, answering ``replies`` to "Refund order 42"."""
    api = CountingServer().start()
    try:
        spec = (
            rig.agent("support")
            .tool("lookup_order")
            .http_tool("refund", **refund_tool(api.url))
            .build()
        )
        rig.fake.enqueue(*replies)
        return await rig.run(spec, "Refund order 42")
    finally:
        api.stop()


async def code_and_http_tools(rig: Rig) -> RunHandle:
    return await _refund_support(
        rig,
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "42"})),
        Reply.tool_calls(
            ToolCall("refund", {"order_id": "42"}),
            ToolCall("lookup_order", {"order_id": "42"}),
        ),
        Reply.text("Refunded order 42."),
    )


async def large_result_read_back(rig: Rig) -> RunHandle:
    spec = rig.agent("stock").tool("inventory").limits(large_result_bytes=256).build()
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("inventory")),
        Reply.tool_calls(
            ToolCall("read_tool_output", {"handle": INVENTORY_REF, "offset": 256, "length": 200})
        ),
        Reply.text("Item 039 has 23 in stock."),
    )
    return await rig.run(spec, "How many of item 039?")


async def foreign_handle_refused(rig: Rig) -> RunHandle:
    # A handle this Run was never shown (another Run's): refused in the workflow, behind
    # the read-own-results patch, as a missing one is.
    spec = rig.agent("prier").build()
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("read_tool_output", {"handle": INVENTORY_REF})),
        Reply.text("Nothing to read."),
    )
    return await rig.run(spec, "Read that inventory.")


async def skill_loaded(rig: Rig) -> RunHandle:
    spec = (
        rig.agent("skilled")
        .skill("refunds", "How refunds work.", body="Refund within 30 days only.")
        .build()
    )
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("load_skill", {"name": "refunds"})),
        Reply.text("Refunds are possible within 30 days."),
    )
    return await rig.run(spec, "Can I get a refund?")


async def load_skill_checked_before_patch(rig: Rig) -> RunHandle:
    """``load_skill`` called for a skill whose body is over ``large_result_bytes`` (1000),
    and with no name, a name that is no text, an argument it does not take and an unknown
    name, recorded before psych-load-skill-checked: every call answered ``ok``, the body
    whole and the bad calls as if for a skill named ''."""
    body = "".join(f"Rule {n}: refunds within 30 days of delivery.\n" for n in range(40))
    spec = (
        rig.agent("skilled")
        .skill("refunds", "How refunds work.", body=body)
        .limits(large_result_bytes=1000)
        .build()
    )
    rig.fake.enqueue(
        Reply.tool_calls(
            ToolCall("load_skill", {"name": "refunds"}),
            ToolCall("load_skill", {}),
            ToolCall("load_skill", {"name": 7}),
            ToolCall("load_skill", {"name": "refunds", "section": "gifts"}),
            ToolCall("load_skill", {"name": "returns"}),
        ),
        Reply.text("Refunds are possible within 30 days."),
    )
    return await rig.run(spec, "Can I get a refund?")


async def load_skill_checked(rig: Rig) -> RunHandle:
    """The same, behind psych-load-skill-checked: the body stored and shown as a handle
    with a preview, the bad calls errors naming what is wrong."""
    return await load_skill_checked_before_patch(rig)


async def malformed_and_unknown_tool_calls(rig: Rig) -> RunHandle:
    rig.fake.enqueue(
        Reply.malformed_tool_call("lookup_order", '{"order_id": '),
        Reply.tool_calls(ToolCall("no_such_tool", {})),
        Reply.text("done"),
    )
    return await rig.run(rig.agent("sloppy").tool("lookup_order").build())


async def over_the_per_turn_call_cap(rig: Rig) -> RunHandle:
    rig.fake.enqueue(
        Reply.tool_calls(
            ToolCall("lookup_order", {"order_id": "1"}),
            ToolCall("lookup_order", {"order_id": "2"}),
        ),
        Reply.text("Only one was looked up."),
    )
    spec = rig.agent("capped").tool("lookup_order").limits(max_tool_calls_per_turn=1).build()
    return await rig.run(spec)


async def transient_failure_then_fallback(rig: Rig) -> RunHandle:
    spec = AgentBuilder("fb").model("fake-model", fallbacks=["fake-fallback"]).build()
    rig.fake.enqueue(Reply.error(503), Reply.text("finally"), model="fake-model")
    rig.fake.enqueue(Reply.error(429, retry_after=0.5), model="fake-fallback")
    return await rig.run(spec)


async def retry_budget_exhausted(rig: Rig) -> RunHandle:
    rig.fake.enqueue(Reply.error(502), Reply.error(502))
    return await rig.run(rig.agent("budget").limits(transient_retry_budget=1).build())


async def non_transient_failure(rig: Rig) -> RunHandle:
    rig.fake.enqueue(Reply.error(400, message="bad request shape"))
    return await rig.run(rig.agent("bad").build())


async def failure_streak_withheld(rig: Rig) -> RunHandle:
    spec = (
        rig.agent("streak")
        .tool("flaky")
        .limits(failure_streak_threshold=2, failure_streak_hard_stop=6)
        .build()
    )
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("flaky", {"x": 1})),
        Reply.tool_calls(ToolCall("flaky", {"x": 2})),
        Reply.text("The tool is broken; I answer without it."),
    )
    return await rig.run(spec)


async def failure_streak_hard_stop(rig: Rig) -> RunHandle:
    spec = (
        rig.agent("streak")
        .tool("flaky")
        .limits(failure_streak_threshold=2, failure_streak_hard_stop=3)
        .build()
    )
    rig.fake.enqueue(*[Reply.tool_calls(ToolCall("flaky", {"x": i})) for i in range(3)])
    return await rig.run(spec)


async def repeat_guard_refusal(rig: Rig) -> RunHandle:
    spec = (
        rig.agent("rep")
        .tool("lookup_order")
        .limits(repeat_call_threshold=2, repeat_call_hard_stop=4)
        .build()
    )
    same = ToolCall("lookup_order", {"order_id": "7"})
    rig.fake.enqueue(*[Reply.tool_calls(same) for _ in range(3)], Reply.text("Order 7: delivered."))
    return await rig.run(spec)


async def repeat_guard_hard_stop(rig: Rig) -> RunHandle:
    spec = (
        rig.agent("rep")
        .tool("lookup_order")
        .limits(repeat_call_threshold=2, repeat_call_hard_stop=3)
        .build()
    )
    same = ToolCall("lookup_order", {"order_id": "7"})
    rig.fake.enqueue(*[Reply.tool_calls(same) for _ in range(3)])
    return await rig.run(spec)


async def max_turns_stop(rig: Rig) -> RunHandle:
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "1"})),
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "2"})),
    )
    return await rig.run(rig.agent("looper").tool("lookup_order").limits(max_turns=2).build())


async def version_mismatch(rig: Rig) -> RunHandle:
    spec = rig.agent("tampered").build()
    other = rig.agent("original").build()
    forged = Version(hash=Version.of(other).hash, spec=spec, published_at=datetime.now(UTC))
    run_id = uuid.uuid4().hex
    async with rig.worker():
        await rig.env.client.start_workflow(
            AGENT_RUN,
            AgentRunInput(run_id=run_id, version=forged, scope=SCOPE, messages=("Hello",)),
            id=workflow_id_for(SCOPE.tenant, run_id),
            task_queue=rig.settings.task_queue,
        )
        run = RunHandle(workflow_id_for(SCOPE.tenant, run_id), run_id, SCOPE.tenant, "", "")
        await rig.settle(run)
    return run


async def _crashed(rig: Rig, method: Literal["GET", "POST"]) -> RunHandle:
    """A worker process is SIGKILLed while the Run's HTTP call is in flight."""
    api = CountingServer(delay=5.0).start()
    spec = (
        rig.agent("crashed")
        .http_tool(
            "order",
            description="Act on an order.",
            url=api.url + "/orders/{order_id}",
            method=method,
        )
        .build()
    )
    rig.fake.enqueue(Reply.tool_calls(ToolCall("order", {"order_id": "42"})), Reply.text("done"))
    target = rig.env.client.service_client.config.target_host
    proc = await spawn(target, rig.settings.task_queue, rig.home / "blobs", rig.fake.base_url)
    try:
        run = await rig.client.dispatch(spec, "Handle order 42", scope=SCOPE)
        async with asyncio.timeout(30):
            while True:  # until the request is in flight
                if api.seen:
                    break
                await asyncio.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        await proc.wait()
        api.delay = 0.0
        async with rig.worker():
            await rig.settle(run)
    finally:
        if proc.returncode is None:
            os.kill(proc.pid, signal.SIGKILL)
            await proc.wait()
        api.stop()
    return run


async def unknown_after_crash(rig: Rig) -> RunHandle:
    return await _crashed(rig, "POST")


async def rerun_after_crash(rig: Rig) -> RunHandle:
    return await _crashed(rig, "GET")


def _deadline_agent(rig: Rig) -> AgentSpec:
    return rig.agent("courier").tool("pause").limits(deadline_seconds=60).build()


async def deadline_force_settled(rig: Rig) -> RunHandle:
    # See tests/e2e/test_deadline.py: the wait is skipped, the in-flight grace is not.
    rig.fake.enqueue(
        Reply.error(429, retry_after=59),
        Reply.tool_calls(ToolCall("pause", {"seconds": 3600})),
    )
    return await rig.run(_deadline_agent(rig))


async def deadline_during_tool_call(rig: Rig) -> RunHandle:
    rig.fake.enqueue(
        Reply.error(429, retry_after=57),
        Reply.tool_calls(ToolCall("pause", {"seconds": 4})),
    )
    return await rig.run(_deadline_agent(rig))


async def deadline_during_retry_wait(rig: Rig) -> RunHandle:
    rig.fake.enqueue(Reply.error(429, retry_after=75))
    return await rig.run(_deadline_agent(rig))


def _orders(rig: Rig) -> AgentSpec:
    """An agent whose delete_order calls wait for an approval."""
    rig.settings.policy = RulePolicy(destructive="ask")
    return rig.agent("orders").tool("delete_order").build()


async def _approval(
    rig: Rig, decide: Callable[[RunHandle, Pending], Awaitable[object]]
) -> RunHandle:
    spec = _orders(rig)
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("delete_order", {"order_id": "42"})), Reply.text("Done.")
    )
    async with rig.worker():
        run = await rig.client.dispatch(spec, "Delete order 42", scope=SCOPE)
        await decide(run, await rig.suspended(run))
        await rig.settle(run)
    return run


async def approval_granted(rig: Rig) -> RunHandle:
    async def approve(run: RunHandle, pending: Pending) -> object:
        return await rig.client.approve(run, pending.id, scope=SCOPE, note="checked")

    return await _approval(rig, approve)


async def approval_granted_by_signal(rig: Rig) -> RunHandle:
    async def signal(run: RunHandle, pending: Pending) -> object:
        handle = rig.env.client.get_workflow_handle(run.workflow_id)
        approval = ResumeInput(
            reason="approval", id=pending.id, tenant=SCOPE.tenant, by="ops", approved=True
        )
        await handle.signal(RESUME, approval)
        return None

    return await _approval(rig, signal)


async def approval_denied(rig: Rig) -> RunHandle:
    async def deny(run: RunHandle, pending: Pending) -> object:
        return await rig.client.deny(run, pending.id, scope=SCOPE, note="keep it")

    return await _approval(rig, deny)


async def approval_note_bounded_before_patch(rig: Rig) -> RunHandle:
    """A call rejected with a 1,908-byte note under ``large_result_bytes=1000``, recorded
    before psych-rejection-note-bounded: the note is in the call's result, whole."""
    reason = "the order is under a legal hold, as said."
    note = "".join(f"Reason {n:02d}: {reason}\n" for n in range(36))
    rig.settings.policy = RulePolicy(destructive="ask")
    spec = rig.agent("orders").tool("delete_order").limits(large_result_bytes=1000).build()
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("delete_order", {"order_id": "42"})),
        Reply.text("Order 42 stays: it is under a legal hold."),
    )
    async with rig.worker():
        run = await rig.client.dispatch(spec, "Delete order 42", scope=SCOPE)
        pending = await rig.suspended(run)
        await rig.client.deny(run, pending.id, scope=SCOPE, note=note)
        await rig.settle(run)
    return run


async def approval_note_bounded(rig: Rig) -> RunHandle:
    """The same, behind psych-rejection-note-bounded: the rejection stored
    (``psych.tool.store_result``) and shown as a handle with a preview, still rejected."""
    return await approval_note_bounded_before_patch(rig)


class _DownBlobs(LocalBlobStore):
    """A blob store whose next ``failures`` puts fail, once set (the store down)."""

    failures = 0

    async def put(self, data: bytes) -> str:
        if self.failures:
            self.failures -= 1
            raise OSError("the blob volume is gone")
        return await super().put(data)


async def approval_note_unstored_before_patch(rig: Rig) -> RunHandle:
    """``approval_note_bounded``'s rejection while the blob store is down:
    ``psych.tool.store_result`` fails on its three attempts and the Run settles FAILED.
    Recorded at 43d3296, before psych-rejection-unstored-read: the old branch."""
    blobs = _DownBlobs(rig.home / "blobs")
    rig.settings.blobs = blobs
    note = "".join(
        f"Reason {n:02d}: the order is under a legal hold, as said.\n" for n in range(36)
    )
    rig.settings.policy = RulePolicy(destructive="ask")
    spec = rig.agent("orders").tool("delete_order").limits(large_result_bytes=1000).build()
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("delete_order", {"order_id": "42"})),
        Reply.text("Order 42 stays: it is under a legal hold."),
    )
    async with rig.worker():
        run = await rig.client.dispatch(spec, "Delete order 42", scope=SCOPE)
        pending = await rig.suspended(run)
        blobs.failures = 3  # every attempt of psych.tool.store_result
        await rig.client.deny(run, pending.id, scope=SCOPE, note=note)
        await rig.settle(run)
    return run


async def approval_note_unstored(rig: Rig) -> RunHandle:
    """The same, behind psych-rejection-unstored-read: its marker after the store's last
    failure, the call ``rejected`` with the note cut at the bound; answered."""
    return await approval_note_unstored_before_patch(rig)


async def question_answer_unstored_before_patch(rig: Rig) -> RunHandle:
    """``question_answer_bounded``'s answer while the blob store is down:
    ``psych.tool.store_result`` fails on its three attempts and the Run settles FAILED.
    Recorded at 43d3296, before psych-answer-unstored-read: the old branch."""
    blobs = _DownBlobs(rig.home / "blobs")
    rig.settings.blobs = blobs
    answer = "".join(f"Line {n:02d} of the log you asked for, as pasted.\n" for n in range(40))
    spec = (
        rig.agent("asker")
        .suspension(may_ask_questions=True)
        .limits(large_result_bytes=1000)
        .build()
    )
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("ask_question", {"question": "The log?"})),
        Reply.text("The log says the job ran."),
    )
    async with rig.worker():
        run = await rig.client.dispatch(spec, "Why did the job stop?", scope=SCOPE)
        pending = await rig.suspended(run)
        blobs.failures = 3  # every attempt of psych.tool.store_result
        await rig.client.answer(run, pending.id, answer, scope=SCOPE)
        await rig.settle(run)
    return run


async def question_answer_unstored(rig: Rig) -> RunHandle:
    """The same, behind psych-answer-unstored-read: its marker after the store's last
    failure, the answer ``ok`` cut at the bound; answered."""
    return await question_answer_unstored_before_patch(rig)


class _ReportDown(LocalBlobStore):
    """A blob store that cannot take the one blob ``report`` (the lead's store of it)."""

    report = b""

    async def put(self, data: bytes) -> str:
        if data == self.report:
            raise OSError("the blob volume is gone")
        return await super().put(data)


async def delegate_answer_unstored_before_patch(rig: Rig) -> RunHandle:
    """A subagent's 4,690-byte answer under the lead's ``large_result_bytes=1000`` while
    the blob store cannot take it: ``psych.tool.store_result`` fails on its three attempts
    and the lead settles FAILED. Recorded at 43d3296, before
    psych-child-answer-unstored-read: the old branch."""
    rig.settings.endpoints = ModelEndpoints(
        default=Endpoint(base_url=rig.fake.base_url, api_key="delegate-recorder-key")
    )
    report = "".join(f"order {n} is delivered\n" for n in range(200))
    blobs = _ReportDown(rig.home / "blobs")
    blobs.report = report.encode()
    rig.settings.blobs = blobs
    researcher = rig.agent("researcher").build()
    spec = (
        rig.agent("lead")
        .subagent("researcher", "Looks orders up and reports their status.", researcher)
        .limits(large_result_bytes=1000)
        .build()
    )

    def respond(body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        last = messages[-1]
        if not any(m["role"] == "tool" for m in messages) and last["role"] == "user":
            if "status of 42?" in last["content"]:
                return Reply.text(report)  # the subagent
            task = {"agent": "researcher", "task": "status of 42?"}
            return Reply.tool_calls(ToolCall("delegate", task))
        return Reply.text("Order 42 is delivered, as far as shown.")

    rig.fake.responder = respond
    async with rig.worker():
        run = await rig.client.dispatch(spec, "Hello", scope=SCOPE)
        await rig.settle(run)
    return run


async def delegate_answer_unstored(rig: Rig) -> RunHandle:
    """The same, behind psych-child-answer-unstored-read: its marker after the store's
    last failure, the answer ``ok`` cut at the bound; answered."""
    return await delegate_answer_unstored_before_patch(rig)


async def approval_under_a_repeated_id(rig: Rig) -> RunHandle:
    # Two calls of one turn under one id: the second is not run (patch
    # psych-unique-call-ids), the first waits for its approval alone.
    spec = _orders(rig)
    rig.fake.enqueue(
        Reply.tool_calls(
            ToolCall("delete_order", {"order_id": "42"}, id="dup"),
            ToolCall("delete_order", {"order_id": "43"}, id="dup"),
        ),
        Reply.text("Deleted order 42."),
    )
    async with rig.worker():
        run = await rig.client.dispatch(spec, "Delete orders 42 and 43", scope=SCOPE)
        pending = await rig.suspended(run)
        await rig.client.approve(run, pending.id, scope=SCOPE)
        await rig.settle(run)
    return run


async def approval_expired(rig: Rig) -> RunHandle:
    # Nobody answers: the test server jumps the default day to the expiry.
    rig.fake.enqueue(Reply.tool_calls(ToolCall("delete_order", {"order_id": "42"})))
    return await rig.run(_orders(rig), "Delete order 42")


async def question_answered(rig: Rig) -> RunHandle:
    spec = rig.agent("asker").suspension(may_ask_questions=True).build()
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("ask_question", {"question": "Which order?"})),
        Reply.text("Order 42 it is."),
    )
    async with rig.worker():
        run = await rig.client.dispatch(spec, "Refund my order", scope=SCOPE)
        pending = await rig.suspended(run)
        await rig.client.answer(run, pending.id, "42", scope=SCOPE)
        await rig.settle(run)
    return run


async def question_answer_bounded_before_patch(rig: Rig) -> RunHandle:
    """``ask_question`` answered with 1,800 bytes under ``large_result_bytes=1000``,
    recorded before psych-answer-bounded: the answer is the call's result, whole."""
    answer = "".join(f"Line {n:02d} of the log you asked for, as pasted.\n" for n in range(40))
    spec = (
        rig.agent("asker")
        .suspension(may_ask_questions=True)
        .limits(large_result_bytes=1000)
        .build()
    )
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("ask_question", {"question": "The log?"})),
        Reply.text("The log says the job ran."),
    )
    async with rig.worker():
        run = await rig.client.dispatch(spec, "Why did the job stop?", scope=SCOPE)
        pending = await rig.suspended(run)
        await rig.client.answer(run, pending.id, answer, scope=SCOPE)
        await rig.settle(run)
    return run


async def question_answer_bounded(rig: Rig) -> RunHandle:
    """The same, behind psych-answer-bounded: the answer stored (``psych.tool.store_result``)
    and shown as a handle with a preview."""
    return await question_answer_bounded_before_patch(rig)


async def question_blank_signal_ignored(rig: Rig) -> RunHandle:
    # A psych.resume signal answers the question with blank text: ignored, its marker
    # recorded (patch psych-signal-blank-answer); then answered by the update.
    spec = rig.agent("asker").suspension(may_ask_questions=True).build()
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("ask_question", {"question": "Which order?"})),
        Reply.text("Order 42 it is."),
    )
    async with rig.worker():
        run = await rig.client.dispatch(spec, "Refund my order", scope=SCOPE)
        pending = await rig.suspended(run)
        handle = rig.env.client.get_workflow_handle(run.workflow_id)
        blank = ResumeInput(reason="question", id=pending.id, tenant=SCOPE.tenant, answer=" ")
        await handle.signal(RESUME, blank)
        await rig.client.answer(run, pending.id, "42", scope=SCOPE)
        await rig.settle(run)
    return run


async def question_without_text(rig: Rig) -> RunHandle:
    # ask_question with no question: the model is told, nothing is asked (patch
    # psych-question-needs-text); before, the Run waited on a question with no text.
    spec = rig.agent("asker").suspension(may_ask_questions=True).build()
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("ask_question", {})), Reply.text("I will ask properly.")
    )
    return await rig.run(spec, "Refund my order")


async def external_wait_completed(rig: Rig) -> RunHandle:
    spec = rig.agent("payer").tool("request_payment").build()
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("request_payment", {"order_id": "42"})), Reply.text("Paid.")
    )
    async with rig.worker():
        run = await rig.client.dispatch(spec, "Charge order 42", scope=SCOPE)
        pending = await rig.suspended(run)
        await rig.client.complete(run, pending.id, {"paid": True}, scope=SCOPE)
        await rig.settle(run)
    return run


async def external_wait_completed_hooked(rig: Rig) -> RunHandle:
    # Patch psych-external-result-hooked (its marker as the completion arrives): the payload
    # goes through psych.tool.finish_external (post hooks, stored) before the model reads it.
    return await external_wait_completed(rig)


async def abort_during_interruptible_call(rig: Rig) -> RunHandle:
    GATES.clear()
    spec = rig.agent("searcher").tool("search").build()
    rig.fake.enqueue(Reply.tool_calls(ToolCall("search", {"query": "q"})))
    async with rig.worker():
        run = await rig.client.dispatch(spec, "Search", scope=SCOPE)
        await rig.started("search")
        await rig.client.abort(run, scope=SCOPE, reason="user pressed stop")
        await rig.settle(run)  # the search is cancelled; its gate never opens
    return run


async def abort_during_non_interruptible_call(rig: Rig) -> RunHandle:
    GATES.clear()
    spec = rig.agent("writer").tool("write_record", interruptible=False).build()
    rig.fake.enqueue(Reply.tool_calls(ToolCall("write_record", {"record": "r"})))
    async with rig.worker():
        run = await rig.client.dispatch(spec, "Write", scope=SCOPE)
        gate = await rig.started("write_record")
        await rig.client.abort(run, scope=SCOPE, reason="user pressed stop")
        gate.open.set()  # the write finishes and is recorded; then the Run settles ABORTED
        await rig.settle(run)
    return run


async def abort_while_suspended(rig: Rig) -> RunHandle:
    spec = _orders(rig)
    rig.fake.enqueue(Reply.tool_calls(ToolCall("delete_order", {"order_id": "3"})))
    async with rig.worker():
        run = await rig.client.dispatch(spec, "Delete order 3", scope=SCOPE)
        await rig.suspended(run)
        await rig.client.abort(run, scope=SCOPE)
        await rig.settle(run)
    return run


async def steer_and_follow_up(rig: Rig) -> RunHandle:
    GATES.clear()
    spec = rig.agent("shop").tool("fetch").build()
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("fetch", {"item": "book"})),
        Reply.text("The book is 11 EUR."),
        Reply.text("Shipping is free."),
    )
    async with rig.worker():
        run = await rig.client.dispatch(spec, "Price of the book?", scope=SCOPE)
        gate = await rig.started("fetch")
        await rig.client.steer(run, "Answer in EUR.", scope=SCOPE)
        await rig.client.steer(run, "And shipping?", scope=SCOPE, mode="follow_up")
        gate.open.set()
        await rig.settle(run)
    return run


async def next_run(rig: Rig) -> RunHandle:
    GATES.clear()
    spec = rig.agent("shop").tool("fetch").build()
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("fetch", {"item": "pen"})),
        Reply.text("The pen is 12 USD."),
        Reply.text("Your cart is empty."),
    )
    async with rig.worker():
        run = await rig.client.dispatch(spec, "Price of the pen?", scope=SCOPE)
        gate = await rig.started("fetch")
        await rig.client.steer(run, "What is in my cart?", scope=SCOPE, mode="next_run")
        gate.open.set()
        await rig.settle(run)
        # The history recorded is this Run's (it starts the next one); let that one settle
        # too, so no Run is left behind on the server.
        records = (await rig.client.records(run, scope=SCOPE)).records
        (started,) = [r for r in records if isinstance(r, NextRunStarted)]
        await rig.client.result(started.workflow_id, scope=SCOPE)
    return run


async def max_steps_stop(rig: Rig) -> RunHandle:
    rig.fake.enqueue(
        Reply.tool_calls(
            ToolCall("lookup_order", {"order_id": "1"}),
            ToolCall("lookup_order", {"order_id": "2"}),
            ToolCall("lookup_order", {"order_id": "3"}),
        )
    )
    return await rig.run(rig.agent("stepper").tool("lookup_order").limits(max_steps=3).build())


async def max_steps_during_retries(rig: Rig) -> RunHandle:
    # Two 503s with max_steps=2: each attempt is a step, so no third attempt is made;
    # STOPPED (patch psych-retries-within-max-steps, its marker after the second failure).
    rig.fake.enqueue(Reply.error(503), Reply.error(503), Reply.text("One step too many."))
    return await rig.run(rig.agent("retrying").limits(max_steps=2).build())


async def max_steps_during_retries_before_patch(rig: Rig) -> RunHandle:
    # Recorded before the patch psych-retries-within-max-steps: the same Run made a third
    # attempt past max_steps and answered (COMPLETED, 3 steps). It checks the old branch;
    # recorded again today it would take the new one, so it is never re-recorded.
    return await max_steps_during_retries(rig)


async def policy_denied(rig: Rig) -> RunHandle:
    rig.settings.policy = RulePolicy(tools={"delete_*": "deny"})
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("delete_order", {"order_id": "7"})), Reply.text("Refused.")
    )
    return await rig.run(rig.agent("orders").tool("delete_order").build(), "Delete order 7")


class _PerCall:
    """A policy that decides each call: order 13 is protected."""

    def fixed(self, tool: ToolInfo) -> PolicyDecision | None:
        return None

    async def decide(
        self, scope: Scope, tool: ToolInfo, arguments: Mapping[str, object]
    ) -> PolicyDecision:
        if arguments.get("order_id") == "13":
            return PolicyDecision(decision="deny", reason="order 13 is protected")
        return PolicyDecision(decision="allow")


async def per_call_policy(rig: Rig) -> RunHandle:
    rig.settings.policy = _PerCall()
    rig.fake.enqueue(
        Reply.tool_calls(
            ToolCall("delete_order", {"order_id": "12"}),
            ToolCall("delete_order", {"order_id": "13"}),
        ),
        Reply.text("Done."),
    )
    return await rig.run(rig.agent("orders").tool("delete_order").build(), "Delete 12 and 13")


async def _expired(rig: Rig, spec: AgentSpec, call: ToolCall) -> RunHandle:
    rig.fake.enqueue(Reply.tool_calls(call))
    return await rig.run(spec, "Go")


async def question_expired(rig: Rig) -> RunHandle:
    spec = (
        rig.agent("asker")
        .suspension(may_ask_questions=True, question_expires_seconds=3 * 3600)
        .build()
    )
    return await _expired(rig, spec, ToolCall("ask_question", {"question": "Which order?"}))


async def external_wait_expired(rig: Rig) -> RunHandle:
    spec = rig.agent("payer").tool("request_payment").build()
    return await _expired(rig, spec, ToolCall("request_payment", {"order_id": "42"}))


async def approval_expired_beside_external_wait(rig: Rig) -> RunHandle:
    # One turn waits on an approval (a day) and a payment webhook (a week): the approval's
    # expiry settles the Run ABANDONED at once, ending the other wait (patch
    # psych-expiry-ends-waits); before, the Run waited out the week.
    rig.settings.policy = RulePolicy(destructive="ask")
    spec = rig.agent("orders").tool("delete_order").tool("request_payment").build()
    rig.fake.enqueue(
        Reply.tool_calls(
            ToolCall("delete_order", {"order_id": "42"}, id="c-del"),
            ToolCall("request_payment", {"order_id": "43"}, id="c-pay"),
        )
    )
    return await rig.run(spec, "Delete order 42 and charge order 43")


async def approval_expired_beside_open_call(rig: Rig) -> RunHandle:
    # The approval expires while the turn's other call still runs; that call then returns
    # an external wait, which the Run, settled by the expiry, does not hold (patch
    # psych-expiry-ends-waits, asked at the expiry because a call of the batch is open).
    GATES.clear()
    rig.settings.policy = RulePolicy(destructive="ask")
    spec = (
        rig.agent("orders")
        .tool("delete_order")
        .tool("request_payment_later")
        .suspension(approval_expires_seconds=1, external_expires_seconds=3600)
        .build()
    )
    rig.fake.enqueue(
        Reply.tool_calls(
            ToolCall("delete_order", {"order_id": "1"}, id="c-del"),
            ToolCall("request_payment_later", {"order_id": "2"}, id="c-pay"),
        )
    )
    async with rig.worker():
        run = await rig.client.dispatch(spec, "Delete order 1 and charge order 2", scope=SCOPE)
        gate = await rig.started("request_payment_later")

        async def expired() -> bool:
            records = (await rig.client.records(run, scope=SCOPE)).records
            return any(r.kind == "suspension_expired" for r in records)

        await rig.until(expired, "the approval's expiry")
        gate.open.set()
        await rig.settle(run)
    return run


async def approval_expired_beside_external_wait_before_patch(rig: Rig) -> RunHandle:
    # Recorded before the patch psych-expiry-ends-waits, at 1c7b337: the same Run waited
    # on the payment for the week after its approval expired. It checks the old branch;
    # recorded again today it would take the new one, so it is never re-recorded.
    return await approval_expired_beside_external_wait(rig)


async def _during_model_call(
    rig: Rig, name: str, interrupt: Callable[[RunHandle], Awaitable[None]]
) -> RunHandle:
    """Start a Run whose model call stalls, then ``interrupt`` it while the call streams."""
    rig.fake.enqueue(Reply.stall(30, after_chunks=1))
    async with rig.worker():
        run = await rig.client.dispatch(rig.agent(name).build(), "Hi", scope=SCOPE)

        async def calling() -> bool:
            return len(rig.fake.requests) == 1

        await rig.until(calling, "the model call")
        await interrupt(run)
    return run


async def abort_during_model_call(rig: Rig) -> RunHandle:
    async def abort(run: RunHandle) -> None:
        await rig.client.abort(run, scope=SCOPE, reason="enough")
        await rig.settle(run)

    return await _during_model_call(rig, "slow", abort)


async def workflow_cancelled(rig: Rig) -> RunHandle:
    async def cancel(run: RunHandle) -> None:
        handle = rig.env.client.get_workflow_handle(run.workflow_id)
        await handle.cancel()

        async def closed() -> bool:
            return (await handle.describe()).status is WorkflowExecutionStatus.CANCELED

        await rig.until(closed, "the cancellation")

    return await _during_model_call(rig, "cancelled", cancel)


def _lead(rig: Rig) -> AgentSpec:
    """A lead agent with one subagent, reached through delegate."""
    # A day's deadline, so only the lead's children expiry can end delegate_expired.
    researcher = rig.agent("researcher").tool("lookup_order").limits(deadline_seconds=86400).build()
    return (
        rig.agent("lead")
        .tool("lookup_order")
        .subagent("researcher", "Looks orders up and reports their status.", researcher)
        .build()
    )


async def delegate_answered(rig: Rig) -> RunHandle:
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("delegate", {"agent": "researcher", "task": "status of 42?"})),
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "42"})),  # the subagent
        Reply.text("Order 42 is delivered."),  # the subagent's answer
        Reply.text("The researcher says order 42 is delivered."),  # the lead
    )
    return await rig.run(_lead(rig), "Where is order 42?")


async def delegate_expired(rig: Rig) -> RunHandle:
    # The subagent waits out a two-hour Retry-After; the lead's children expiry (an hour by
    # default) passes first on the test server's clock, and the lead is ABANDONED.
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("delegate", {"agent": "researcher", "task": "status of 42?"})),
        Reply.error(429, retry_after=7200),
    )
    return await rig.run(_lead(rig), "Where is order 42?")


async def delegate_bounded(rig: Rig) -> RunHandle:
    # Patch psych-children-bounded: a delegate call without a task is refused (no child);
    # the subagent names an A2A peer the lead lacks, narrowed away, so it answers without
    # fetching the peer's card (nothing listens on its port).
    # The rig's key "k" is redacted wherever a model sends it back, delegate's "task" too.
    rig.settings.endpoints = ModelEndpoints(
        default=Endpoint(base_url=rig.fake.base_url, api_key="delegate-recorder-key")
    )
    researcher = (
        rig.agent("researcher")
        .tool("lookup_order")
        .a2a_peer("travel", "http://127.0.0.1:9/")
        .limits(deadline_seconds=86400)
        .build()
    )
    lead = (
        rig.agent("lead")
        .tool("lookup_order")
        .subagent("researcher", "Looks orders up and reports their status.", researcher)
        .build()
    )
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("delegate", {"agent": "researcher"})),
        Reply.tool_calls(ToolCall("delegate", {"agent": "researcher", "task": "status of 42?"})),
        Reply.text("Order 42 is delivered."),  # the subagent's answer
        Reply.text("The researcher says order 42 is delivered."),  # the lead
    )
    return await rig.run(lead, "Where is order 42?")


# --- WorkflowRun shapes ---------------------------------------------------------------------


def _workflow(rig: Rig, name: str) -> WorkflowBuilder:
    return WorkflowBuilder(name, registry=TOOLS)


async def workflow_three_steps(rig: Rig) -> RunHandle:
    nested = (
        _workflow(rig, "nested")
        .tool("lookup_order")
        .tool_step("again", "lookup_order", {"order_id": "7"})
    )
    spec = (
        _workflow(rig, "onboard")
        .tool("lookup_order")
        .tool_step("look", "lookup_order", {"order_id": "42"})
        .agent_step("tell", rig.agent("teller").instructions("Summarise.").build())
        .workflow_step("nested", nested)
        .build()
    )
    rig.fake.enqueue(Reply.text("Order 42 is on its way."))
    return await rig.run(spec, "Check order 42")


async def workflow_step_failed(rig: Rig) -> RunHandle:
    spec = (
        _workflow(rig, "failing")
        .tool("flaky")
        .tool("lookup_order")
        .tool_step("break", "flaky", {"x": 1})
        .tool_step("never", "lookup_order", {"order_id": "1"})
        .build()
    )
    return await rig.run(spec)


async def workflow_agent_step_failed(rig: Rig) -> RunHandle:
    spec = _workflow(rig, "agent-fails").agent_step("talk", rig.agent("talker").build()).build()
    rig.fake.enqueue(Reply.error(400))
    return await rig.run(spec)


def _deleting_workflow(rig: Rig) -> WorkflowSpec:
    rig.settings.policy = RulePolicy(destructive="ask")
    return (
        _workflow(rig, "deleting")
        .tool("delete_order")
        .tool_step("delete", "delete_order", {"order_id": "42"})
        .build()
    )


async def workflow_tool_step_approved(rig: Rig) -> RunHandle:
    spec = _deleting_workflow(rig)
    async with rig.worker():
        run = await rig.client.dispatch(spec, "Delete order 42", scope=SCOPE)
        pending = await rig.suspended(run)
        await rig.client.approve(run, pending.id, scope=SCOPE, note="checked")
        await rig.settle(run)
    return run


async def workflow_tool_step_expired(rig: Rig) -> RunHandle:
    # Nobody answers: the test server jumps the workflow's default day to the expiry.
    return await rig.run(_deleting_workflow(rig), "Delete order 42")


async def workflow_agent_step_approved(rig: Rig) -> RunHandle:
    orders = _orders(rig)
    spec = _workflow(rig, "delegating").agent_step("orders", orders).build()
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("delete_order", {"order_id": "9"})), Reply.text("Deleted.")
    )
    async with rig.worker():
        run = await rig.client.dispatch(spec, "Delete order 9", scope=SCOPE)
        pending = await rig.suspended(run)  # the child's approval, seen through the workflow
        await rig.client.approve(run, pending.id, scope=SCOPE)
        await rig.settle(run)
    return run


async def workflow_agent_step_question(rig: Rig) -> RunHandle:
    asker = rig.agent("asker").suspension(may_ask_questions=True).build()
    spec = _workflow(rig, "asking").agent_step("ask", asker).build()
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("ask_question", {"question": "Which order?"})),
        Reply.text("Order 42 it is."),
    )
    async with rig.worker():
        run = await rig.client.dispatch(spec, "Refund my order", scope=SCOPE)
        pending = await rig.suspended(run)  # the child's question, through the workflow
        await rig.client.answer(run, pending.id, "42", scope=SCOPE)
        await rig.settle(run)
    return run


async def workflow_abort_during_agent_step(rig: Rig) -> RunHandle:
    GATES.clear()
    spec = (
        _workflow(rig, "searching")
        .agent_step("search", rig.agent("searcher").tool("search").build())
        .build()
    )
    rig.fake.enqueue(Reply.tool_calls(ToolCall("search", {"query": "q"})))
    async with rig.worker():
        run = await rig.client.dispatch(spec, "Search", scope=SCOPE)
        await rig.started("search")
        await rig.client.abort(run, scope=SCOPE, reason="user pressed stop")
        await rig.settle(run)
    return run


async def workflow_abort_during_tool_step(rig: Rig) -> RunHandle:
    GATES.clear()
    spec = (
        _workflow(rig, "searching-step").tool("search").tool_step("find", "search", {"query": "q"})
    )
    async with rig.worker():
        run = await rig.client.dispatch(spec.build(), "Search", scope=SCOPE)
        await rig.started("search")
        await rig.client.abort(run, scope=SCOPE, reason="user pressed stop")
        await rig.settle(run)  # the search is cancelled; the workflow settles ABORTED
    return run


async def _cancelled_during_agent_step(rig: Rig) -> RunHandle:
    """Cancel a WorkflowRun (as an operator does) while its agent step's non-interruptible
    tool call runs; the call then finishes."""
    GATES.clear()
    writer = rig.agent("writer").tool("write_record", interruptible=False).build()
    spec = _workflow(rig, "writing").agent_step("write", writer).build()
    rig.fake.enqueue(Reply.tool_calls(ToolCall("write_record", {"record": "r"})))
    async with rig.worker():
        run = await rig.client.dispatch(spec, "Write", scope=SCOPE)
        gate = await rig.started("write_record")
        handle = rig.env.client.get_workflow_handle(run.workflow_id)
        await handle.cancel()
        gate.open.set()

        async def closed() -> bool:
            return (await handle.describe()).status is WorkflowExecutionStatus.CANCELED

        await rig.until(closed, "the cancellation")
    return run


async def workflow_cancelled_during_agent_step(rig: Rig) -> RunHandle:
    # Patch psych-workflow-step-winds-down (its marker as the cancellation arrives): the
    # step's Run is aborted, not cancelled; its call finishes, it settles ABORTED and its
    # totals roll up into the workflow's, which then ends cancelled.
    return await _cancelled_during_agent_step(rig)


async def workflow_cancelled_during_agent_step_before_wind_down(rig: Rig) -> RunHandle:
    # Recorded before the patch psych-workflow-step-winds-down: the workflow's cancellation
    # cancelled the step's Run (RequestCancelExternalWorkflowExecution), whose totals never
    # came back, and the step was recorded FAILED "Cancelled". It checks the old branch;
    # recorded again today it would take the new one, so it is never re-recorded.
    return await _cancelled_during_agent_step(rig)


async def workflow_steer_forwarded(rig: Rig) -> RunHandle:
    GATES.clear()
    spec = _workflow(rig, "steered").agent_step("shop", rig.agent("shop").tool("fetch").build())
    rig.fake.enqueue(Reply.tool_calls(ToolCall("fetch", {"item": "book"})), Reply.text("11 EUR."))
    async with rig.worker():
        run = await rig.client.dispatch(spec.build(), "Price of the book?", scope=SCOPE)
        gate = await rig.started("fetch")
        await rig.client.steer(run, "Answer in EUR.", scope=SCOPE)
        child = f"{run.workflow_id}-step1"

        async def arrived() -> bool:
            records = (await rig.client.records(child, scope=SCOPE)).records
            return any(r.kind == "steer_received" for r in records)

        await rig.until(arrived, "the steer to reach the agent step")
        gate.open.set()
        await rig.settle(run)
    return run


async def workflow_text_step_output(rig: Rig) -> RunHandle:
    # The tool's text "42" stays text in the outputs and in what the agent step reads
    # (patch psych-workflow-text-step-output: its marker at the first step's end).
    spec = (
        _workflow(rig, "counting")
        .tool("count_orders")
        .tool_step("count", "count_orders", {"customer": "Ada"})
        .agent_step("tell", rig.agent("teller").instructions("Summarise.").build())
        .build()
    )
    rig.fake.enqueue(Reply.text("Ada has 42 orders."))
    return await rig.run(spec, "Count Ada's orders")


LONG_TEXT = 530_000
"""Two such tool results pass the outputs' bound (``MAX_OUTPUTS_BYTES``, 1 MiB): the least
history that shows it."""


async def workflow_outputs_past_bound(rig: Rig) -> RunHandle:
    # Local tool steps, their results shown inline (under large_result_bytes): the second's
    # would take the outputs past their bound, so the Run fails there and the third never
    # runs (patch psych-workflow-outputs-bounded, asked at its start).
    spec = (
        _workflow(rig, "long-texts")
        .tool("long_text")
        .tool_step("first", "long_text", {"letter": "f", "size": LONG_TEXT})
        .tool_step("second", "long_text", {"letter": "s", "size": LONG_TEXT})
        .tool_step("never", "long_text", {"letter": "n", "size": 1})
        .limits(large_result_bytes=LONG_TEXT + 1)
        .build()
    )
    return await rig.run(spec, "Write")


async def agent_start_outputs_bounded(rig: Rig) -> RunHandle:
    """An AgentRun recorded since ``psych-workflow-outputs-bounded``: its start records that
    marker alone (it stands for the older start patches), then a code tool and an answer."""
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "42"})),
        Reply.text("Order 42 was delivered."),
    )
    return await rig.run(rig.agent("orders").tool("lookup_order").build(), "Where is 42?")


async def workflow_steer_signal_refused(rig: Rig) -> RunHandle:
    # A psych.steer signal while the nested workflow waits in its tool step: recorded
    # steer_refused, not forwarded (patch psych-signal-steer-target-refused).
    inner = _deleting_workflow(rig)
    spec = _workflow(rig, "outer").workflow_step("nested", inner).build()
    async with rig.worker():
        run = await rig.client.dispatch(spec, "Delete order 42", scope=SCOPE)
        pending = await rig.suspended(run)
        handle = rig.env.client.get_workflow_handle(run.workflow_id)
        await handle.signal(STEER, SteerInput(tenant=SCOPE.tenant, message="Hurry.", by="ops"))

        async def refused() -> bool:
            records = (await rig.client.records(run, scope=SCOPE)).records
            return any(r.kind == "steer_refused" for r in records)

        await rig.until(refused, "the steer signal to be recorded refused")
        await rig.client.approve(run, pending.id, scope=SCOPE)
        await rig.settle(run)
    return run


async def workflow_steer_signal_before_refusal(rig: Rig) -> RunHandle:
    # Recorded at 2ff342c, before the patch psych-signal-steer-target-refused: a
    # psych.steer signal while the nested workflow waits in its tool step was recorded
    # steer_received and forwarded (and lost there). It checks the old branch; recorded
    # again today it would take the new one (steer_refused), so it is never re-recorded.
    inner = _deleting_workflow(rig)
    spec = _workflow(rig, "outer").workflow_step("nested", inner).build()
    async with rig.worker():
        run = await rig.client.dispatch(spec, "Delete order 42", scope=SCOPE)
        pending = await rig.suspended(run)
        handle = rig.env.client.get_workflow_handle(run.workflow_id)
        await handle.signal(STEER, SteerInput(tenant=SCOPE.tenant, message="Hurry.", by="ops"))

        async def taken() -> bool:
            records = (await rig.client.records(run, scope=SCOPE)).records
            return any(r.kind in ("steer_received", "steer_refused") for r in records)

        await rig.until(taken, "the steer signal to be recorded")
        await rig.client.approve(run, pending.id, scope=SCOPE)
        await rig.settle(run)
    return run


async def workflow_steer_signal_tool_step(rig: Rig) -> RunHandle:
    # A psych.steer signal while the workflow's own tool step waits for approval: recorded
    # steer_refused (patch psych-signal-steer-target-refused; before it, only logged).
    spec = _deleting_workflow(rig)
    async with rig.worker():
        run = await rig.client.dispatch(spec, "Delete order 42", scope=SCOPE)
        pending = await rig.suspended(run)
        handle = rig.env.client.get_workflow_handle(run.workflow_id)
        await handle.signal(STEER, SteerInput(tenant=SCOPE.tenant, message="Hurry.", by="ops"))

        async def refused() -> bool:
            records = (await rig.client.records(run, scope=SCOPE)).records
            return any(r.kind == "steer_refused" for r in records)

        await rig.until(refused, "the steer signal to be recorded refused")
        await rig.client.approve(run, pending.id, scope=SCOPE)
        await rig.settle(run)
    return run


# --- MCP ----------------------------------------------------------------------------------


@asynccontextmanager
async def _mcp_server(
    transport: Transport = "streamable-http", *, filler: int = 0
) -> AsyncIterator[McpTestServer]:
    server = start_mcp_server(transport, filler=filler)
    try:
        yield server
    finally:
        server.stop()


def _mcp_agent(rig: Rig, server: McpTestServer) -> AgentBuilder:
    transport: Literal["http", "sse"] = "sse" if server.transport == "sse" else "http"
    return rig.agent("mcp").mcp_server("tools", server.url, transport=transport)


async def _mcp_call(rig: Rig, transport: Transport) -> RunHandle:
    async with _mcp_server(transport) as server:
        rig.fake.enqueue(
            Reply.tool_calls(ToolCall("tools__lookup", {"id": "42"})),
            Reply.tool_calls(ToolCall("tools__fail", {"reason": "no"})),
            Reply.text("Record 42 is active."),
        )
        return await rig.run(_mcp_agent(rig, server).build(), "Look up 42")


async def mcp_discovery_and_call(rig: Rig) -> RunHandle:
    return await _mcp_call(rig, "streamable-http")


async def mcp_over_sse(rig: Rig) -> RunHandle:
    return await _mcp_call(rig, "sse")


async def mcp_optional_unavailable(rig: Rig) -> RunHandle:
    rig.fake.enqueue(Reply.text("Answered without it."))
    spec = rig.agent("mcp").mcp_server("down", "http://127.0.0.1:9/mcp", optional=True).build()
    return await rig.run(spec)


async def mcp_authorization_at_turn(rig: Rig) -> RunHandle:
    return await consent_shapes.mcp_authorization_at_turn(rig, rig.env.client, SCOPE)


async def mcp_authorization_at_turn_uncounted(rig: Rig) -> RunHandle:
    # Patch psych-uncounted-attempts (its marker as the attempt fails for the consent): the
    # attempt that made no request is taken back from the totals (model calls, steps).
    return await consent_shapes.mcp_authorization_at_turn(rig, rig.env.client, SCOPE)


async def mcp_authorization_at_call(rig: Rig) -> RunHandle:
    return await consent_shapes.mcp_authorization_at_call(rig, rig.env.client, SCOPE)


async def workflow_mcp_authorization(rig: Rig) -> RunHandle:
    return await consent_shapes.workflow_mcp_authorization(rig, rig.env.client, SCOPE)


async def mcp_authorization_expired(rig: Rig) -> RunHandle:
    return await consent_shapes.mcp_authorization_expired(rig, rig.env.client, SCOPE)


async def mcp_consent_refused_at_turn(rig: Rig) -> RunHandle:
    return await consent_shapes.mcp_consent_refused_at_turn(rig, rig.env.client, SCOPE)


async def mcp_consent_refused_at_call(rig: Rig) -> RunHandle:
    return await consent_shapes.mcp_consent_refused_at_call(rig, rig.env.client, SCOPE)


async def mcp_consent_refused_optional_at_turn(rig: Rig) -> RunHandle:
    return await consent_shapes.mcp_consent_refused_optional_at_turn(rig, rig.env.client, SCOPE)


async def mcp_consent_refused_optional_at_turn_noted(rig: Rig) -> RunHandle:
    return await consent_shapes.mcp_consent_refused_optional_at_turn(rig, rig.env.client, SCOPE)


async def mcp_consent_note_bounded_before_patch(rig: Rig) -> RunHandle:
    return await consent_shapes.mcp_consent_note_bounded(rig, rig.env.client, SCOPE)


async def mcp_consent_note_bounded(rig: Rig) -> RunHandle:
    return await consent_shapes.mcp_consent_note_bounded(rig, rig.env.client, SCOPE)


async def a2a_peer_called(rig: Rig) -> RunHandle:
    # A scripted a2a-sdk peer on loopback (tests/a2a/peer.py): its card fetched at each
    # boundary (psych.a2a.cards, a local activity), one skill narrowed out by allow, a
    # call answered with an artifact, then one the peer answers input-required.
    async with serve_peer(("echo", "ask", "wipe")) as peer:
        rig.fake.enqueue(
            Reply.tool_calls(ToolCall("helper__echo", {"message": "hi"})),
            Reply.tool_calls(ToolCall("helper__ask", {"message": "ask:which colour?"})),
            Reply.text("done"),
        )
        spec = rig.agent("a2a").a2a_peer("helper", peer.url, allow=("ask", "echo")).build()
        return await rig.run(spec)


async def a2a_peer_task_waited(rig: Rig) -> RunHandle:
    # The peer works past the call's 5 s hold: the call returns a wait, the Run suspends
    # (external), psych.a2a.poll reads the task on a backing-off timer, and the poller
    # completes the wait with the answer (Resumed by the peer).
    async with serve_peer(("book",)) as peer:
        rig.fake.enqueue(
            Reply.tool_calls(ToolCall("travel__book", {"message": "slow:9"})),
            Reply.text("Booked."),
        )
        return await rig.run(rig.agent("a2a").a2a_peer("travel", peer.url).build())


async def a2a_peer_task_completed_by_hand(rig: Rig) -> RunHandle:
    # The peer works on (hold 0.5 s, a minute-long task): the Run waits on its task, and an
    # operator completes the a2a: token by hand before the poller reads an answer. With
    # patch psych-a2a-completion-hooked (its marker as the completion arrives) the payload
    # goes through psych.tool.finish_external (kind a2a: post hooks, stored).
    rig.settings.a2a = A2aSettings(hold_seconds=0.5)
    async with serve_peer(("book",)) as peer:
        rig.fake.enqueue(
            Reply.tool_calls(ToolCall("travel__book", {"message": "slow:60"})),
            Reply.text("Booked."),
        )
        spec = rig.agent("a2a").a2a_peer("travel", peer.url).build()
        async with rig.worker():
            run = await rig.client.dispatch(spec, "Book it", scope=SCOPE)
            pending = await rig.suspended(run)
            await rig.client.complete(run, pending.id, {"booked": True}, scope=SCOPE)
            await rig.settle(run)
        return run


async def a2a_peer_task_completed_by_hand_before_patch(rig: Rig) -> RunHandle:
    # Recorded at c8b5ffd, before the patch psych-a2a-completion-hooked: the payload was
    # the call's result as sent. It checks the old branch; recorded again today it would
    # take the new one: never re-recorded.
    return await a2a_peer_task_completed_by_hand(rig)


async def a2a_peer_question_answered(rig: Rig) -> RunHandle:
    # may_ask_questions: the peer's input-required question becomes a question suspension
    # of the Run (not the model's), the person's answer is sent to the peer in its task
    # (psych.tool.a2a, answer 1) outside the open call, and its answer is the call's result.
    # The rig's key "k" is redacted wherever a model sends it back: "ask:" would not reach
    # the peer as such.
    rig.settings.endpoints = ModelEndpoints(
        default=Endpoint(base_url=rig.fake.base_url, api_key="a2a-recorder-key")
    )
    async with serve_peer(("ask",)) as peer:
        rig.fake.enqueue(
            Reply.tool_calls(ToolCall("helper__ask", {"message": "ask:which colour?"})),
            Reply.text("Blue it is."),
        )
        spec = (
            rig.agent("a2a").suspension(may_ask_questions=True).a2a_peer("helper", peer.url).build()
        )
        async with rig.worker():
            run = await rig.client.dispatch(spec, "Pick a colour", scope=SCOPE)
            pending = await rig.suspended(run)
            await rig.client.answer(run, pending.id, "blue", scope=SCOPE)
            await rig.settle(run)
        return run


async def a2a_peer_question_after_wait(rig: Rig) -> RunHandle:
    # may_ask_questions and a hold of 0: the peer's task works, the call's outcome is a
    # wait the feature suspends on (external), the poller finds the task input-required
    # and ends the wait with the question, which becomes a question suspension; the
    # answer goes to the peer in the task (psych.tool.a2a, answer 1), answered.
    rig.settings.a2a = A2aSettings(hold_seconds=0)
    async with serve_peer(("book",)) as peer:
        rig.fake.enqueue(
            Reply.tool_calls(ToolCall("travel__book", {"message": "later:1:which seat?"})),
            Reply.text("Window seat booked."),
        )
        spec = (
            rig.agent("a2a").suspension(may_ask_questions=True).a2a_peer("travel", peer.url).build()
        )
        async with rig.worker():
            run = await rig.client.dispatch(spec, "Book it", scope=SCOPE)
            pending = await rig.suspended(run)
            while pending.reason != "question":
                await asyncio.sleep(0.5)
                pending = await rig.suspended(run)
            await rig.client.answer(run, pending.id, "window", scope=SCOPE)
            await rig.settle(run)
        return run


async def a2a_peer_task_pushed(rig: Rig) -> RunHandle:
    # A peer whose card supports push notifications, a worker with a push_url: the call
    # asks the peer to push to psych serve's route, the Run waits (the A2A feature's own
    # external wait), the peer's push completes it with {"a2a_pushed": ...} before the
    # second poll, and the Run reads the task at once (psych.a2a.poll), answered.
    rig.settings.tokens = LocalTokenStore(rig.home / "tokens")
    async with (
        serve_app(rig.client, tokens=rig.settings.tokens, tenant=SCOPE.tenant) as base,
        serve_peer(("book",), push=True) as peer,
    ):
        rig.settings.a2a = A2aSettings(hold_seconds=0.5, push_url=f"{base}/a2a-push")
        rig.fake.enqueue(
            Reply.tool_calls(ToolCall("travel__book", {"message": "slow:3"})),
            Reply.text("Booked."),
        )
        return await rig.run(rig.agent("a2a").a2a_peer("travel", peer.url).build())


async def a2a_peer_task_canceled(rig: Rig) -> RunHandle:
    # psych.abort while the Run waits on a peer task (external, a2a:<peer>:<task>): the
    # poller's timer is cancelled and psych.a2a.cancel asks the peer to cancel the task
    # (patch psych-a2a-cancel-peer-task), recorded as peer_task_canceled; ABORTED.
    async with serve_peer(("book",)) as peer:
        rig.fake.enqueue(Reply.tool_calls(ToolCall("travel__book", {"message": "slow:60"})))
        spec = rig.agent("a2a").a2a_peer("travel", peer.url).build()
        async with rig.worker():
            run = await rig.client.dispatch(spec, "Book it", scope=SCOPE)
            await rig.suspended(run)
            await rig.client.abort(run, scope=SCOPE, reason="changed my mind")
            await rig.settle(run)
        return run


async def a2a_peer_question_canceled(rig: Rig) -> RunHandle:
    # may_ask_questions: the peer's input-required question becomes a question suspension;
    # psych.abort before the person answers: psych.a2a.cancel asks the peer to cancel the
    # task waiting there (patch psych-a2a-cancel-asked-peer-task), recorded as
    # peer_task_canceled; ABORTED. The key apart from "k", as in a2a_peer_question_answered.
    rig.settings.endpoints = ModelEndpoints(
        default=Endpoint(base_url=rig.fake.base_url, api_key="a2a-recorder-key")
    )
    async with serve_peer(("ask",)) as peer:
        rig.fake.enqueue(
            Reply.tool_calls(ToolCall("helper__ask", {"message": "ask:which colour?"})),
        )
        spec = (
            rig.agent("a2a").suspension(may_ask_questions=True).a2a_peer("helper", peer.url).build()
        )
        async with rig.worker():
            run = await rig.client.dispatch(spec, "Pick a colour", scope=SCOPE)
            await rig.suspended(run)
            await rig.client.abort(run, scope=SCOPE, reason="changed my mind")
            await rig.settle(run)
        return run


async def a2a_peer_question_canceled_before_patch(rig: Rig) -> RunHandle:
    # Recorded at 12eac6a, before the patch psych-a2a-cancel-asked-peer-task: the same Run
    # settled ABORTED without asking the peer (its task left input-required there). It
    # checks the old branch; recorded again today it would take the new one, so it is
    # never re-recorded.
    return await a2a_peer_question_canceled(rig)


async def a2a_poll_through_failures(rig: Rig) -> RunHandle:
    # Hold 0.5: the Run waits on the peer task (external); the peer then answers 503 to
    # every read (restarting) until one psych.a2a.poll has failed its three attempts: the
    # poller reads again on its timer (patch psych-a2a-poll-through-failures), the peer is
    # back, the answer completes the wait, answered.
    rig.settings.a2a = A2aSettings(hold_seconds=0.5)
    async with serve_peer(("book",)) as peer:
        rig.fake.enqueue(
            Reply.tool_calls(ToolCall("travel__book", {"message": "slow:3"})),
            Reply.text("Booked."),
        )
        spec = rig.agent("a2a").a2a_peer("travel", peer.url).build()
        async with rig.worker():
            run = await rig.client.dispatch(spec, "Book it", scope=SCOPE)
            await rig.suspended(run)
            peer.down = True
            while True:  # one read's three attempts refused
                if peer.refused >= 3:
                    break
                await asyncio.sleep(0.1)
            peer.down = False
            await rig.settle(run)
        return run


async def a2a_poll_through_failures_before_patch(rig: Rig) -> RunHandle:
    # Recorded at 8a72bc1, before the patch psych-a2a-poll-through-failures: the failed
    # read ended the wait with the failure as its result, and the Run answered. It checks
    # the old branch; recorded again today it would take the new one: never re-recorded.
    return await a2a_poll_through_failures(rig)


async def a2a_pushed_read_through_failures(rig: Rig) -> RunHandle:
    # A peer that supports push, a worker with a push_url, hold 0.5: once the message is
    # at the peer it answers 503 to every read (restarting) while its push of the task's
    # end still reaches psych serve's route; the read the push asks for fails its three
    # attempts, and the Run waits on (patch psych-a2a-pushed-read-through-failures); the
    # peer is back, the poller reads the end, answered.
    rig.settings.tokens = LocalTokenStore(rig.home / "tokens")
    async with (
        serve_app(rig.client, tokens=rig.settings.tokens, tenant=SCOPE.tenant) as base,
        serve_peer(("book",), push=True) as peer,
    ):
        rig.settings.a2a = A2aSettings(hold_seconds=0.5, push_url=f"{base}/a2a-push")
        rig.fake.enqueue(
            Reply.tool_calls(ToolCall("travel__book", {"message": "slow:3"})),
            Reply.text("Booked."),
        )
        spec = rig.agent("a2a").a2a_peer("travel", peer.url).build()
        async with rig.worker():
            run = await rig.client.dispatch(spec, "Book it", scope=SCOPE)

            async def sent() -> bool:
                return bool(peer.requests)

            await rig.until(sent, "the message at the peer")
            peer.down = True

            async def refused() -> bool:  # the hold's read, the poller's, the pushed one's
                return peer.refused >= 7

            await rig.until(refused, "the reads refused")
            peer.down = False
            await rig.settle(run)
        return run


async def a2a_pushed_read_through_failures_before_patch(rig: Rig) -> RunHandle:
    # Recorded at 91a0ca3, before the patch psych-a2a-pushed-read-through-failures: the
    # failed read the push asked for ended the call with the failure as its result. It
    # checks the old branch; recorded again today it would take the new one: never
    # re-recorded.
    return await a2a_pushed_read_through_failures(rig)


async def a2a_optional_unavailable(rig: Rig) -> RunHandle:
    rig.fake.enqueue(Reply.text("Answered without it."))
    spec = rig.agent("a2a").a2a_peer("down", "http://127.0.0.1:9", optional=True).build()
    return await rig.run(spec)


async def a2a_required_unreachable(rig: Rig) -> RunHandle:
    spec = rig.agent("a2a").a2a_peer("down", "http://127.0.0.1:9").build()
    return await rig.run(spec)


async def a2a_cards_blob_lost(rig: Rig) -> RunHandle:
    # The blob of the Run's own tool definitions leaves the store while the Run waits for an
    # approval; a fresh worker (no blob cache) resumes it and psych.a2a.cards (a local
    # activity) fails non-retryably at the next boundary. With patch
    # psych-a2a-cards-failure-settles the Run settles FAILED ("A2A cards: ..."); before it,
    # the local activity's failure failed the workflow execution without RunSettled.
    async with serve_peer(("echo",)) as peer:
        rig.settings.policy = RulePolicy(destructive="ask")
        spec = rig.agent("a2a").tool("delete_order").a2a_peer("helper", peer.url).build()
        rig.fake.enqueue(Reply.tool_calls(ToolCall("delete_order", {"order_id": "42"})))
        async with rig.worker():
            run = await rig.client.dispatch(spec, "Delete order 42", scope=SCOPE)
            pending = await rig.suspended(run)
        stored = rig.settings.blobs
        assert isinstance(stored, LocalBlobStore)
        for path in stored.root.glob("??/*"):
            path.unlink()
        rig.settings.blobs = LocalBlobStore(stored.root, recent_bytes=0)
        async with rig.worker():
            await rig.client.approve(run, pending.id, scope=SCOPE)
            await rig.settle(run)
        return run


@asynccontextmanager
async def _silent_port() -> AsyncIterator[int]:
    """A port on loopback whose server takes each connection and never answers."""
    held: list[asyncio.StreamWriter] = []

    async def hold(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    silent = await asyncio.start_server(hold, "127.0.0.1", 0)
    try:
        yield silent.sockets[0].getsockname()[1]
    finally:
        for writer in held:
            writer.close()
        silent.close()


async def _run_until_timed_out(rig: Rig, spec: AgentSpec | WorkflowSpec, text: str) -> RunHandle:
    """Dispatch ``spec`` and wait (up to 5 minutes) until it settles, FAILED included."""
    async with rig.worker():
        run = await rig.client.dispatch(spec, text, scope=SCOPE)
        async with asyncio.timeout(300):
            with contextlib.suppress(RunFailed):
                await rig.client.result(run, scope=SCOPE)
    return run


async def a2a_cards_timed_out(rig: Rig) -> RunHandle:
    # A peer whose card endpoint takes the connection and never answers, on a worker whose
    # card fetch waits longer than psych.a2a.cards may run (60 s an attempt, three
    # attempts): the local activity times out on its last attempt, about three minutes.
    # Live that reaches the boundary as an ActivityError and the Run settles FAILED ("A2A
    # cards: ..."); its marker replays as a bare TimeoutError, read the same with patch
    # psych-a2a-cards-failure-settles (before, the history did not replay).
    async with _silent_port() as port:
        rig.settings.a2a = A2aSettings(card_timeout_seconds=600)
        spec = rig.agent("a2a").a2a_peer("silent", f"http://127.0.0.1:{port}").build()
        return await _run_until_timed_out(rig, spec, "Hello")


async def a2a_cards_timed_out_before_patch(rig: Rig) -> RunHandle:
    # Recorded at 8fbf618's code, before the patch psych-a2a-cards-failure-settles: the Run
    # settled FAILED live on the ActivityError (the boundary caught it alone), and its
    # marker replays as the bare TimeoutError; the old branch, never re-recorded.
    return await a2a_cards_timed_out(rig)


async def a2a_cards_blob_lost_before_patch(rig: Rig) -> RunHandle:
    # Recorded before the patch psych-a2a-cards-failure-settles: the workflow execution
    # failed at the boundary; the old branch, never re-recorded.
    return await a2a_cards_blob_lost(rig)


async def workflow_start_cards_settle(rig: Rig) -> RunHandle:
    """A WorkflowRun recorded since ``psych-a2a-cards-failure-settles``: its start records
    that marker alone (it stands for the older start patches), then three steps."""
    return await workflow_three_steps(rig)


async def workflow_start_unpermitted_told(rig: Rig) -> RunHandle:
    """A WorkflowRun recorded since ``psych-unpermitted-told``: its start records that
    marker alone (it stands for the older start patches), then three steps."""
    return await workflow_three_steps(rig)


async def mcp_required_unreachable(rig: Rig) -> RunHandle:
    spec = rig.agent("mcp").mcp_server("crm", "http://127.0.0.1:9/mcp").build()
    return await rig.run(spec)


async def mcp_required_unreachable_uncounted(rig: Rig) -> RunHandle:
    # Patch psych-uncounted-attempts: the attempt the unreachable server stopped before any
    # request is no model call and no step in the FAILED Run's totals.
    return await mcp_required_unreachable(rig)


async def mcp_list_changed(rig: Rig) -> RunHandle:
    async with _mcp_server() as server:
        rig.fake.enqueue(
            Reply.tool_calls(ToolCall("tools__slow", {"seconds": 2})),
            Reply.tool_calls(ToolCall("tools__fresh", {"text": "new"})),
            Reply.text("done"),
        )
        async with rig.worker():
            run = await rig.client.dispatch(_mcp_agent(rig, server).build(), "Go", scope=SCOPE)

            async def slow_running() -> bool:
                return server.calls("slow") == 1

            await rig.until(slow_running, "the slow call to reach the server")
            server.add_tool("fresh")
            await rig.settle(run)
    return run


async def mcp_deferred_search(rig: Rig) -> RunHandle:
    async with _mcp_server(filler=20) as server:
        rig.fake.enqueue(
            Reply.tool_calls(ToolCall("search_mcp_tools", {"query": "filler_007"})),
            Reply.tool_calls(ToolCall("tools__filler_007", {"text": "found"})),
            Reply.text("done"),
        )
        return await rig.run(_mcp_agent(rig, server).build(), "Find")


async def mcp_abort_during_call(rig: Rig) -> RunHandle:
    async with _mcp_server() as server:
        rig.fake.enqueue(Reply.tool_calls(ToolCall("tools__slow", {"seconds": 60})))
        async with rig.worker():
            run = await rig.client.dispatch(_mcp_agent(rig, server).build(), "Wait", scope=SCOPE)

            async def slow_running() -> bool:
                return server.calls("slow") == 1

            await rig.until(slow_running, "the slow call to reach the server")
            await rig.client.abort(run, scope=SCOPE, reason="enough")
            await rig.settle(run)
    return run


async def workflow_mcp_tool_step(rig: Rig) -> RunHandle:
    async with _mcp_server() as server:
        spec = WorkflowSpec.model_validate(
            {
                "name": "mcp-flow",
                "mcp_servers": [{"name": "tools", "url": server.url}],
                "steps": [
                    {
                        "kind": "tool",
                        "name": "greet",
                        "tool": "tools__echo",
                        "arguments": {"text": "x"},
                    }
                ],
            }
        )
        return await rig.run(spec, "go")


async def workflow_mcp_discovery_timed_out(rig: Rig) -> RunHandle:
    # A WorkflowRun's tool step names a tool of an MCP server that takes the connection and
    # never answers, on a worker whose connect bound is longer than psych.mcp.list_tools
    # may run (60 s an attempt, three attempts): the local activity times out on its last
    # attempt, about three minutes. Live that reaches the step as an ActivityError and the
    # Run settles FAILED ("MCP discovery failed: ..."); its marker replays as a bare
    # TimeoutError, read the same with patch psych-a2a-cards-failure-settles (before, the
    # history did not replay).
    async with _silent_port() as port:
        rig.settings.mcp = McpSettings(connect_timeout_seconds=600)
        spec = WorkflowSpec.model_validate(
            {
                "name": "mcp-silent",
                "mcp_servers": [{"name": "tools", "url": f"http://127.0.0.1:{port}/mcp"}],
                "steps": [
                    {"kind": "tool", "name": "greet", "tool": "tools__echo", "arguments": {}},
                ],
            }
        )
        return await _run_until_timed_out(rig, spec, "go")


async def workflow_mcp_discovery_timed_out_before_patch(rig: Rig) -> RunHandle:
    # Recorded at 8fbf618's code, before the patch psych-a2a-cards-failure-settles: the Run
    # settled FAILED live on the ActivityError ("MCP discovery failed: ..."), and its marker
    # replays as the bare TimeoutError; the old branch, never re-recorded.
    return await workflow_mcp_discovery_timed_out(rig)


async def mcp_input_required_answered(rig: Rig) -> RunHandle:
    # A 2026-07-28 server asks how many before it orders: a question, then the retried call.
    server = start_modern_server()
    try:
        spec = (
            rig.agent("mcp")
            .mcp_server("shop", server.url)
            .suspension(may_ask_questions=True)
            .build()
        )
        rig.fake.enqueue(
            Reply.tool_calls(ToolCall("shop__order", {"item": "tea"})),
            Reply.text("Ordered."),
        )
        async with rig.worker():
            run = await rig.client.dispatch(spec, "Order tea", scope=SCOPE)
            pending = await rig.suspended(run)
            await rig.client.answer(run, pending.id, "3", scope=SCOPE)
            await rig.settle(run)
        return run
    finally:
        server.stop()


# --- tasks, components and context providers (issue 10 item 4, issue 11 item 5) -----------


async def tasks_updated(rig: Rig) -> RunHandle:
    plan = [{"title": "Look up the order", "status": "in_progress"}]
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("update_tasks", {"tasks": plan})),
        Reply.tool_calls(ToolCall("update_tasks", {"tasks": [{"title": "x", "status": "?"}]})),
        Reply.text("Planned."),
    )
    return await rig.run(rig.agent("planner").tasks().build(), "Plan it")


async def component_shown(rig: Rig) -> RunHandle:
    card = {"kind": "card", "title": "Order 42", "link": "https://shop.example/42"}
    rig.fake.enqueue(
        Reply.tool_calls(
            ToolCall("show_component", {"component": card}),
            ToolCall("show_component", {"component": {**card, "link": "ftp://x"}}),
        ),
        Reply.text("Shown."),
    )
    return await rig.run(rig.agent("shower").components().build(), "Show order 42")


async def context_provided_turn(rig: Rig) -> RunHandle:
    async def customer(request: ContextRequest) -> str:
        return "Customer: Ada, plan gold."

    async def broken(request: ContextRequest) -> str:
        raise RuntimeError("crm is down")

    rig.settings = dataclasses.replace(
        rig.settings,
        context=ContextSettings(
            sources=(ContextSource("customer", customer), ContextSource("broken", broken))
        ),
    )
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "42"})), Reply.text("Delivered.")
    )
    return await rig.run(rig.agent("support").tool("lookup_order").build(), "Order 42?")


# --- tool-call hooks (issue 11) ------------------------------------------------------------


def _hook_guard(call: HookCall) -> Deny | dict[str, str] | None:
    if call.arguments.get("order_id") == "frozen":
        return Deny("order frozen is under review")
    return {"order_id": "42"} if call.arguments.get("order_id") == "7" else None


def _hook_redact(call: HookCall, result: str) -> str:
    return result.replace("delivered", "[redacted]")


def _hook_fallback(call: HookCall, error: str) -> str:
    return f"fallback: {error}"


async def hooked_tool_calls(rig: Rig) -> RunHandle:
    """A pre hook denying one call and rewriting another, a post hook redacting its
    result and an on_error hook replacing a failure (the hooks run in the activities)."""
    rig.settings = dataclasses.replace(
        rig.settings,
        hooks=Hooks()
        .pre("lookup_order", _hook_guard)
        .post("lookup_order", _hook_redact)
        .on_error("flaky", _hook_fallback),
    )
    spec = rig.agent("hooked").tool("lookup_order").tool("flaky").build()
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "frozen"})),
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "7"}), ToolCall("flaky", {"x": 1})),
        Reply.text("Order 42 is [redacted]."),
    )
    return await rig.run(spec, "Where is order 7?")


def _slower_booking(call: HookCall) -> dict[str, Any]:
    return {**call.arguments, "message": "slow:2"}


def _booked_with(call: HookCall, result: str) -> str:
    return f"{result} (sent: {call.arguments['message']})"


async def a2a_poll_ran_arguments(rig: Rig) -> RunHandle:
    """A pre hook rewrites a peer call's message, the peer works past the hold of 0, and
    the polls carry the rewritten arguments (patch psych-a2a-poll-ran-arguments, its marker
    as the call's wait starts), so the post hook on the answer sees what was sent."""
    rig.settings = dataclasses.replace(
        rig.settings,
        a2a=A2aSettings(hold_seconds=0),
        hooks=Hooks().pre("travel__book", _slower_booking).post("travel__book", _booked_with),
    )
    async with serve_peer(("book",)) as peer:
        rig.fake.enqueue(
            Reply.tool_calls(ToolCall("travel__book", {"message": "slow:1"})),
            Reply.text("Booked."),
        )
        return await rig.run(rig.agent("a2a").a2a_peer("travel", peer.url).build())


_ARTIFACT_REF = "sha256:" + hashlib.sha256(b"x" * 3000).hexdigest()
"""The ref the peer's ``big:3000`` artifact is stored under (its blob's content hash)."""


async def a2a_artifact_handle_read_before_patch(rig: Rig) -> RunHandle:
    """A peer's 3,000-byte artifact over ``large_result_bytes=1000``, stored as its own blob
    and shown as a handle, which the model reads with read_tool_output; recorded before
    psych-a2a-artifact-handles: the handle on no record, the read refused as another
    Run's."""
    async with serve_peer(("book",)) as peer:
        rig.fake.enqueue(
            Reply.tool_calls(ToolCall("travel__book", {"message": "big:3000"})),
            Reply.tool_calls(
                ToolCall("read_tool_output", {"handle": _ARTIFACT_REF, "length": 4000}, id="r1")
            ),
            Reply.text("Booked."),
        )
        spec = rig.agent("a2a").a2a_peer("travel", peer.url).limits(large_result_bytes=1000)
        return await rig.run(spec.build())


async def a2a_artifact_handle_read(rig: Rig) -> RunHandle:
    """The same, behind psych-a2a-artifact-handles (its marker as the peer call's record is
    made): the artifact's ref on that record, the read the Run's own (psych.tool.read_output
    runs)."""
    return await a2a_artifact_handle_read_before_patch(rig)


# --- compaction and threads (issue 10 items 3 and 5) --------------------------------------

_OVER = FakeUsage(input_tokens=500, output_tokens=5)


def _compacting(rig: Rig, name: str) -> AgentSpec:
    return (
        rig.agent(name)
        .tool("lookup_order")
        .compaction(100, keep_recent_turns=1, model="fake-fallback")
        .build()
    )


async def compaction_applied(rig: Rig) -> RunHandle:
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "1"}), usage=_OVER),
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "2"}), usage=_OVER),
        Reply.text("Both shipped."),
    )
    rig.fake.enqueue(Reply.text("Order 1 shipped."), model="fake-fallback")
    return await rig.run(_compacting(rig, "compactor"), "Orders 1 and 2?")


async def compaction_failed(rig: Rig) -> RunHandle:
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "1"}), usage=_OVER),
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "2"}), usage=_OVER),
        Reply.text("Both shipped."),
    )
    rig.fake.enqueue(Reply.error(400, message="no summary"), model="fake-fallback")
    return await rig.run(_compacting(rig, "compactor"), "Orders 1 and 2?")


async def compaction_in_bounded_step(rig: Rig) -> RunHandle:
    """The child AgentRun of a workflow's agent step whose max_steps the workflow narrows
    to 6: at the boundary after turn 2 (5 steps) the summariser would take the 6th, so it
    is not run and turn 3 answers within the bound (patch psych-compaction-within-bounds,
    its marker after turn 1's model call)."""
    rig.fake.enqueue(
        Reply.tool_calls(
            ToolCall("lookup_order", {"order_id": "1"}),
            ToolCall("lookup_order", {"order_id": "2"}),
            usage=_OVER,
        ),
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "3"}), usage=_OVER),
        Reply.text("All three shipped."),
    )
    rig.fake.enqueue(Reply.text("Orders 1 and 2 shipped."), model="fake-fallback")
    spec = _workflow(rig, "bounded").agent_step("orders", _compacting(rig, "compactor"))
    run = await rig.run(spec.limits(max_steps=6).build(), "Orders 1, 2 and 3?")
    return dataclasses.replace(run, workflow_id=f"{run.workflow_id}-step1")


async def compaction_in_bounded_step_before_patch(rig: Rig) -> RunHandle:
    # Recorded before the patch psych-compaction-within-bounds: the summariser was checked
    # against the Spec's max_steps, so it ran as the 6th step and turn 3's model call took a
    # 7th, past the workflow's bound. It checks the old branch; never re-recorded.
    return await compaction_in_bounded_step(rig)


async def thread_continued(rig: Rig) -> RunHandle:
    rig.fake.enqueue(
        Reply.text("Order 42 shipped."),
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "43"})),
        Reply.text("Order 43 shipped too."),
    )
    spec = rig.agent("threads").tool("lookup_order").limits(max_history_records=10).build()
    async with rig.worker():
        first = await rig.client.dispatch(spec, "Order 42?", scope=SCOPE)
        await rig.settle(first)
        run = await rig.client.dispatch(spec, "And order 43?", scope=SCOPE, thread=first)
        await rig.settle(run)
    return run


# --- subagents done right (issue 10, item 1) ------------------------------------------------


async def delegate_failed_child_rolled_up(rig: Rig) -> RunHandle:
    # The subagent answers one call, then fails: its totals ride on its RunFailed error into
    # the lead's, and the lead's model reads its ending as typed JSON.
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("delegate", {"agent": "researcher", "task": "status of 42?"})),
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "42"})),  # the subagent
        Reply.error(400, message="the researcher's model refuses"),  # the subagent fails
        Reply.text("The researcher failed; I cannot say."),  # the lead
    )
    return await rig.run(_lead(rig), "Where is order 42?")


async def delegate_refused_depth(rig: Rig) -> RunHandle:
    # The researcher allows no depth below the root, so the validator refuses this tree; sent
    # unpublished, the lead's delegate is refused at run time with the validator's words.
    researcher = rig.agent("researcher").tool("lookup_order").limits(max_delegation_depth=0)
    spec = (
        rig.agent("lead")
        .tool("lookup_order")
        .subagent("researcher", "Looks orders up and reports their status.", researcher.build())
        .build()
    )
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("delegate", {"agent": "researcher", "task": "status of 42?"})),
        Reply.text("I will look it up myself."),
    )
    run_id = uuid.uuid4().hex
    async with rig.worker():
        await rig.env.client.start_workflow(
            AGENT_RUN,
            AgentRunInput(run_id=run_id, version=Version.of(spec), scope=SCOPE, messages=("42?",)),
            id=workflow_id_for(SCOPE.tenant, run_id),
            task_queue=rig.settings.task_queue,
        )
        run = RunHandle(workflow_id_for(SCOPE.tenant, run_id), run_id, SCOPE.tenant, "", "")
        await rig.settle(run)
    return run


# --- hot path (issue 15) -------------------------------------------------------------------


async def one_queue_code_tool(rig: Rig) -> RunHandle:
    """A Run not dispatched roles apart: every activity on its own queue, the catalogue a
    local activity."""
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "42"})),
        Reply.text("Order 42 was delivered."),
    )
    return await rig.run(rig.agent("orders").tool("lookup_order").build(), "Where is 42?")


async def catalog_tool_not_registered(rig: Rig) -> RunHandle:
    """A Run on one queue whose code tool the worker's registry lacks: the local catalogue
    fails ``ToolNotRegistered`` and the Run settles FAILED, ``run_settled`` and its status
    written (patch ``psych-catalog-failure-settles``, asked at its start)."""
    async with run_worker(
        rig.env.client, dataclasses.replace(rig.settings, registry=ToolRegistry())
    ):
        run = await rig.client.dispatch(
            rig.agent("orders").tool("lookup_order").build(), "Where is 42?", scope=SCOPE
        )
        await rig.settle(run)
    return run


class _StalledBlobs(LocalBlobStore):
    """A blob store whose every put waits until cancelled (a store holding the connection)."""

    async def put(self, data: bytes) -> str:
        await asyncio.Event().wait()
        raise AssertionError("never set")


async def catalog_timed_out_before_settles(rig: Rig) -> RunHandle:
    """A Run on one queue whose blob store never answers: the local catalogue cannot store
    the tool definitions and times out on each of its five attempts (about five minutes).
    Live that is an ActivityError and the Run settles FAILED, "tools: Activity timed out";
    its marker replays as the bare TimeoutError. Recorded at 8e73b53, before
    ``psych-catalog-failure-settles``: the old branch, never re-recorded."""
    rig.settings.blobs = _StalledBlobs(rig.home / "blobs")
    spec = rig.agent("stalled").tool("lookup_order").build()
    async with rig.worker():
        run = await rig.client.dispatch(spec, "Hello", scope=SCOPE)
        async with asyncio.timeout(480):
            with contextlib.suppress(RunFailed):
                await rig.client.result(run, scope=SCOPE)
    return run


async def over_the_per_turn_call_cap_no_streak(rig: Rig) -> RunHandle:
    """Eight calls with ``max_tool_calls_per_turn=1``: the seven not run count toward no
    failure streak (patch ``psych-batch-accounting``, asked at the Run's start; before it
    they withheld the tool and failed the Run at the default hard stop), answered."""
    rig.fake.enqueue(
        Reply.tool_calls(*(ToolCall("lookup_order", {"order_id": str(n)}) for n in range(8))),
        Reply.text("Only order 0 was looked up."),
    )
    spec = rig.agent("capped").tool("lookup_order").limits(max_tool_calls_per_turn=1).build()
    return await rig.run(spec)


async def roles_apart_code_tool(rig: Rig) -> RunHandle:
    """A Run dispatched roles apart: the model call and the tools (the catalogue too, as an
    activity) on their roles' queues."""
    apart = PsychClient(
        rig.env.client,
        store=rig.client.store,
        task_queue=rig.client.task_queue,
        registry=TOOLS,
        roles_apart=True,
    )
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "42"})),
        Reply.text("Order 42 was delivered."),
    )
    async with rig.worker():
        run = await apart.dispatch(
            rig.agent("orders").tool("lookup_order").build(), "Where is 42?", scope=SCOPE
        )
        await rig.settle(run)
    return run


async def fleet_roles_apart_code_tool(rig: Rig) -> RunHandle:
    """A Run whose client says nothing of roles, on a fleet that runs them apart (issue 26,
    item 2): the Run records the fleet's answer (patch marker ``psych-roles-apart``) and
    schedules the model call and the tools on their roles' queues."""
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "42"})),
        Reply.text("Order 42 was delivered."),
    )
    apart = dataclasses.replace(rig.settings, roles_apart=True)
    async with run_worker(rig.env.client, apart):
        run = await rig.client.dispatch(
            rig.agent("orders").tool("lookup_order").build(), "Where is 42?", scope=SCOPE
        )
        await rig.settle(run)
    return run


async def workflow_agent_step_delegates(rig: Rig) -> RunHandle:
    # The step's agent runs at the workflow's depth, so its
    # subagent starts at depth 1, within the step agent's max_delegation_depth of 1.
    lead = _lead(rig)
    capped = lead.model_copy(
        update={"limits": lead.limits.model_copy(update={"max_delegation_depth": 1})}
    )
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("delegate", {"agent": "researcher", "task": "status of 42?"})),
        Reply.text("Order 42 is delivered."),  # the subagent
        Reply.text("The researcher says order 42 is delivered."),  # the step's agent
    )
    spec = _workflow(rig, "stepping").agent_step("orders", capped).build()
    return await rig.run(spec, "Where is order 42?")


async def delegate_parent_aborted(rig: Rig) -> RunHandle:
    # The lead is aborted while its subagent's search runs: the lead aborts the subagent,
    # which cancels the search and settles ABORTED with
    # its totals, and the lead takes them before it settles ABORTED.
    GATES.clear()
    searcher = rig.agent("searcher").tool("search").build()
    spec = (
        rig.agent("lead")
        .tool("search")
        .subagent("searcher", "Searches and reports what it found.", searcher)
        .build()
    )
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("delegate", {"agent": "searcher", "task": "find q"})),
        Reply.tool_calls(ToolCall("search", {"query": "q"})),  # the subagent
    )
    async with rig.worker():
        run = await rig.client.dispatch(spec, "Search", scope=SCOPE)
        await rig.started("search")
        await rig.client.abort(run, scope=SCOPE, reason="user pressed stop")
        await rig.settle(run)
    return run


async def _cancel_when_searching(rig: Rig, spec: AgentSpec) -> RunHandle:
    """Dispatch ``spec``, cancel its workflow (as an operator does) once a child's search
    runs, and wait until it has closed."""
    async with rig.worker():
        run = await rig.client.dispatch(spec, "Search", scope=SCOPE)
        await rig.started("search")
        handle = rig.env.client.get_workflow_handle(run.workflow_id)
        await handle.cancel()

        async def closed() -> bool:
            return (await handle.describe()).status is WorkflowExecutionStatus.CANCELED

        await rig.until(closed, "the cancellation")
    return run


async def _delegate_cancelled(rig: Rig) -> RunHandle:
    GATES.clear()
    # The rig's key "k" is redacted wherever a model sends it back, delegate's "task" too.
    rig.settings.endpoints = ModelEndpoints(
        default=Endpoint(base_url=rig.fake.base_url, api_key="delegate-recorder-key")
    )
    searcher = rig.agent("searcher").tool("search").build()
    spec = (
        rig.agent("lead")
        .tool("search")
        .subagent("searcher", "Searches and reports what it found.", searcher)
        .build()
    )
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("delegate", {"agent": "searcher", "task": "find q"})),
        Reply.tool_calls(ToolCall("search", {"query": "q"})),  # the subagent
    )
    return await _cancel_when_searching(rig, spec)


async def delegate_parent_cancelled(rig: Rig) -> RunHandle:
    # Patch psych-children-wind-down (its marker as the cancellation arrives): the lead,
    # cancelled while its subagent's search runs, signals psych.abort to the subagent,
    # which cancels the search and settles ABORTED with its totals within the wind-down
    # timer; the lead takes them, settles ABORTED and ends cancelled.
    return await _delegate_cancelled(rig)


async def delegate_parent_cancelled_before_wind_down(rig: Rig) -> RunHandle:
    # Recorded before the patch psych-children-wind-down: the lead, cancelled while its
    # subagent's search ran, ended cancelled at once and left the subagent to its close
    # policy (terminated), its totals lost. It checks the old branch; recorded again today
    # it would take the new one, so it is never re-recorded.
    return await _delegate_cancelled(rig)


# --- spawn (issue 10, item 2) ----------------------------------------------------------------


def _spawn_wiring(rig: Rig) -> None:
    """The worker publishes spawned children's Versions where the rig's client reads them."""
    rig.settings.versions = rig.client.store
    # The rig's key "k" is redacted wherever a model sends it back, spawn's "task" included.
    rig.settings.endpoints = ModelEndpoints(
        default=Endpoint(base_url=rig.fake.base_url, api_key="spawn-recorder-key")
    )


def _spawner(rig: Rig) -> AgentSpec:
    """A lead that may spawn children holding lookup_order (not flaky); see
    ``_spawn_wiring``."""
    _spawn_wiring(rig)
    return (
        rig.agent("lead")
        .instructions("You lead.")
        .tool("lookup_order")
        .tool("flaky")
        .spawn(tools=["lookup_order"])
        .build()
    )


def _spawn_call(tools: list[str]) -> ToolCall:
    arguments = {"name": "finder", "instructions": "You find orders.", "task": "status of 42?"}
    return ToolCall("spawn", {**arguments, "tools": tools})


async def delegate_past_parents_deadline(rig: Rig) -> RunHandle:
    # Patch psych-clock-runs-with-children (its marker as the child's start resolves): the
    # lead's deadline clock (2 s) runs while its subagent works (a 5 s model call), so the
    # lead takes the answer within its grace and settles FORCE_SETTLED with no next turn.
    # The rig's key "k" is redacted wherever a model sends it back, delegate's "task" too.
    rig.settings.endpoints = ModelEndpoints(
        default=Endpoint(base_url=rig.fake.base_url, api_key="delegate-recorder-key")
    )
    researcher = rig.agent("researcher").limits(deadline_seconds=60).build()
    spec = (
        rig.agent("lead")
        .subagent("researcher", "Looks orders up and reports their status.", researcher)
        .limits(deadline_seconds=2)
        .build()
    )
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("delegate", {"agent": "researcher", "task": "status of 42?"})),
        Reply.stall(5.0, then=Reply.text("Order 42 is delivered.")),  # the subagent
    )
    return await rig.run(spec, "Where is order 42?")


async def delegate_large_answer_stored(rig: Rig) -> RunHandle:
    # Patch psych-child-answers-stored (its marker as the child's ending arrives): the
    # subagent's answer is over the lead's large_result_bytes (1000), so
    # psych.tool.store_result stores it and the lead is shown a handle with a preview; it
    # reads the answer back with read_tool_output (its own handle), then answers.
    # The rig's key "k" is redacted wherever a model sends it back, delegate's "task" too.
    rig.settings.endpoints = ModelEndpoints(
        default=Endpoint(base_url=rig.fake.base_url, api_key="delegate-recorder-key")
    )
    researcher = rig.agent("researcher").build()
    spec = (
        rig.agent("lead")
        .subagent("researcher", "Looks orders up and reports their status.", researcher)
        .limits(large_result_bytes=1000)
        .build()
    )
    report = "".join(f"order {n} is delivered\n" for n in range(200))

    def respond(body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        last = messages[-1]
        if not any(m["role"] == "tool" for m in messages) and last["role"] == "user":
            if "status of 42?" in last["content"]:
                return Reply.text(report)  # the subagent
            task = {"agent": "researcher", "task": "status of 42?"}
            return Reply.tool_calls(ToolCall("delegate", task))
        handle = re.search(r'handle "(sha256:[0-9a-f]{64})"', last["content"])
        if handle is not None:
            arguments = {"handle": handle.group(1), "offset": 0, "length": 65536}
            return Reply.tool_calls(ToolCall("read_tool_output", arguments))
        return Reply.text("Order 42 is delivered.")

    rig.fake.responder = respond
    return await rig.run(spec, "Where is order 42?")


def _lead_and_finder(body: dict[str, Any]) -> Reply:
    """The fake model of the spawn-and-wait shapes: the lead ("You lead.") spawns a finder
    with ``lookup_order``, waits for it and tells its answer; the finder looks order 42 up
    and answers."""
    messages = body["messages"]
    last = messages[-1]
    if "You lead." in messages[0]["content"]:
        if last["role"] == "user":
            return Reply.tool_calls(_spawn_call(["lookup_order"]))
        if last["content"].startswith('{"child"'):
            return Reply.tool_calls(ToolCall("wait_children", {}))
        return Reply.text("The finder says: " + last["content"])
    if last["role"] == "user":
        return Reply.tool_calls(ToolCall("lookup_order", {"order_id": "42"}))
    return Reply.text("Order 42 is delivered.")


async def spawn_and_wait(rig: Rig) -> RunHandle:
    rig.fake.responder = _lead_and_finder
    return await rig.run(_spawner(rig), "Where is order 42?")


async def delegate_answer_cut_off_before_patch(rig: Rig) -> RunHandle:
    """The subagent's answer is cut at its model's output limit (``finish_reason: length``):
    the lead reads it. Recorded before psych-child-cut-answer-told: the lead read the cut
    text as a whole answer, with nothing saying it is cut."""
    # The rig's key "k" is redacted wherever a model sends it back, delegate's "task" too.
    rig.settings.endpoints = ModelEndpoints(
        default=Endpoint(base_url=rig.fake.base_url, api_key="delegate-recorder-key")
    )
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("delegate", {"agent": "researcher", "task": "status of 42?"})),
        Reply.text("Order 42 was shipped on Monday and", cut_off=True),  # the subagent
        Reply.text("The researcher's answer stops short."),  # the lead
    )
    return await rig.run(_lead(rig), "Where is order 42?")


async def delegate_answer_cut_off(rig: Rig) -> RunHandle:
    """The same, behind psych-child-cut-answer-told (its marker as the child's ending
    arrives): the delegate result the lead reads starts with a ``[runtime]`` note."""
    return await delegate_answer_cut_off_before_patch(rig)


def _lead_and_cut_finder(body: dict[str, Any]) -> Reply:
    """``_lead_and_finder`` whose finder answers at once, cut at its output limit."""
    messages = body["messages"]
    if "You lead." not in messages[0]["content"] and messages[-1]["role"] == "user":
        return Reply.text("Order 42 was shipped on Monday and", cut_off=True)
    return _lead_and_finder(body)


async def spawn_answer_cut_off_before_patch(rig: Rig) -> RunHandle:
    """A spawned child's answer is cut at its model's output limit; the lead collects it
    with wait_children. Recorded before psych-child-cut-answer-told: its ending carried
    the cut text as a whole answer."""
    rig.fake.responder = _lead_and_cut_finder
    return await rig.run(_spawner(rig), "Where is order 42?")


async def spawn_answer_cut_off(rig: Rig) -> RunHandle:
    """The same, behind psych-child-cut-answer-told (its marker as wait_children returns the
    ending): the ending carries ``cut_short``."""
    return await spawn_answer_cut_off_before_patch(rig)


async def spawn_parent_cancelled(rig: Rig) -> RunHandle:
    # Patch psych-children-wind-down (its marker as the cancellation arrives): the lead,
    # cancelled while it waits for its spawned child's search, ends its live children as
    # a settling Run does (psych.abort, then the 30 s timer); the child cancels the search
    # and settles ABORTED with its totals, which the lead takes before it ends cancelled.
    GATES.clear()
    _spawn_wiring(rig)
    spec = rig.agent("lead").instructions("You lead.").tool("search").spawn(tools=["search"])

    def respond(body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        last = messages[-1]
        if "You lead." in messages[0]["content"]:
            if last["role"] == "user":
                return Reply.tool_calls(_spawn_call(["search"]))
            return Reply.tool_calls(ToolCall("wait_children", {}))
        return Reply.tool_calls(ToolCall("search", {"query": "q"}))

    rig.fake.responder = respond
    return await _cancel_when_searching(rig, spec.build())


async def spawn_with_unbudgeted_fallbacks(rig: Rig) -> RunHandle:
    """``spawn_and_wait`` by a lead whose model has a fallback under a transient budget
    of 0 (valid until 12f58df): the composed child, which inherits both, is published and
    started. Recorded at b42c09f with 0a1c6d5's validation: the old branch, never re-record."""
    _spawn_wiring(rig)
    lead = (
        rig.agent("lead")
        .model("fake-model", fallbacks=["fake-model-b"])
        .limits(transient_retry_budget=0)
        .instructions("You lead.")
        .tool("lookup_order")
        .spawn(tools=["lookup_order"])
        .build()
    )

    rig.fake.responder = _lead_and_finder
    return await rig.run(lead, "Where is order 42?")


async def spawn_with_a_blank_envelope_model(rig: Rig) -> RunHandle:
    """``spawn_and_wait`` by a lead whose spawn envelope lists a blank model beside its own
    (valid until 9964667): the composed child, which inherits the envelope, is published
    and started on the lead's model. Recorded at 4f66e43 with 9964667's blank-model check
    taken out of specs/_validation.py: the old branch, never re-record."""
    _spawn_wiring(rig)
    lead = (
        rig.agent("lead")
        .instructions("You lead.")
        .tool("lookup_order")
        .spawn(tools=["lookup_order"], models=["fake-model", ""])
        .build()
    )

    rig.fake.responder = _lead_and_finder
    return await rig.run(lead, "Where is order 42?")


async def spawn_refused(rig: Rig) -> RunHandle:
    rig.fake.enqueue(
        Reply.tool_calls(_spawn_call(["flaky"])),  # outside the envelope: refused
        Reply.text("I will look it up myself."),
    )
    return await rig.run(_spawner(rig), "Where is order 42?")


async def fanout_capped(rig: Rig) -> RunHandle:
    """One delegation and two spawns in one turn under ``max_fanout_per_turn=2``: the
    second spawn starts nothing (the ``psych-fanout-counts-spawn`` patch), the rest answer."""
    researcher = rig.agent("researcher").instructions("You research.").build()
    spec = (
        rig.agent("lead")
        .instructions("You lead.")
        .subagent("researcher", "Looks orders up and reports their status.", researcher)
        .spawn()
        .limits(max_fanout_per_turn=2)
        .build()
    )
    _spawner(rig)  # the spawned Versions are published where the rig's client reads them

    def spawned(n: int) -> ToolCall:
        arguments = {"name": f"finder{n}", "instructions": "You find orders.", "task": f"{n}?"}
        return ToolCall("spawn", arguments, id=f"s{n}")

    def respond(body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        last = messages[-1]
        if "You lead." not in messages[0]["content"]:
            return Reply.text("Order 42 is delivered.")
        if last["role"] == "user":
            delegate = ToolCall("delegate", {"agent": "researcher", "task": "42?"}, id="d0")
            return Reply.tool_calls(delegate, spawned(1), spawned(2))
        if last.get("tool_call_id") == "s2":
            return Reply.tool_calls(ToolCall("wait_children", {}, id="w"))
        return Reply.text("Order 42 is delivered.")

    rig.fake.responder = respond
    return await rig.run(spec, "Where is order 42?")


async def _fanout_refused(rig: Rig) -> RunHandle:
    """Seven delegations in one turn under ``max_fanout_per_turn=1``: one child answers,
    six calls start nothing."""
    # Not the rig's key "k": what a model sends back is redacted of the key, and delegate's
    # "task" argument would lose its name (a delegation without a task starts no child).
    endpoint = Endpoint(base_url=rig.fake.base_url, api_key="recorder-key")
    rig.settings = dataclasses.replace(rig.settings, endpoints=ModelEndpoints(default=endpoint))
    researcher = rig.agent("researcher").instructions("You research.").build()
    spec = (
        rig.agent("lead")
        .instructions("You lead.")
        .subagent("researcher", "Looks orders up and reports their status.", researcher)
        .limits(max_fanout_per_turn=1)
        .build()
    )

    def respond(body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        if "You lead." not in messages[0]["content"]:
            return Reply.text("Order 42 is delivered.")
        if messages[-1]["role"] == "user":
            return Reply.tool_calls(
                *(
                    ToolCall("delegate", {"agent": "researcher", "task": f"{n}?"}, id=f"d{n}")
                    for n in range(7)
                )
            )
        return Reply.text("Order 42 is delivered; the rest were not looked up.")

    rig.fake.responder = respond
    return await rig.run(spec, "Where are orders 0 to 6?")


async def fanout_refused_before_patch(rig: Rig) -> RunHandle:
    """``_fanout_refused`` recorded before the patch ``psych-fanout-no-failure``: the six
    refusals counted as ``delegate`` failing, which was withheld at three and failed the
    Run at six (the default hard stop)."""
    return await _fanout_refused(rig)


async def fanout_refused_no_streak(rig: Rig) -> RunHandle:
    """``_fanout_refused`` with the patch ``psych-fanout-no-failure`` (its marker at the first
    refusal): the refusals count toward no failure streak, answered."""
    return await _fanout_refused(rig)


async def _limit_refused(rig: Rig) -> RunHandle:
    """Seven spawns in one turn under ``spawn.max_alive=1`` (the fanout cap out of the way):
    one child starts and answers, six calls start nothing."""
    _spawn_wiring(rig)
    spec = (
        rig.agent("lead")
        .instructions("You lead.")
        .spawn(max_alive=1)
        .limits(max_fanout_per_turn=8)
        .build()
    )

    def spawned(n: int) -> ToolCall:
        arguments = {"name": f"finder{n}", "instructions": "You find orders.", "task": f"{n}?"}
        return ToolCall("spawn", arguments, id=f"s{n}")

    def respond(body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        last = messages[-1]
        if "You lead." not in messages[0]["content"]:
            return Reply.text("Order 0 is delivered.")
        if last["role"] == "user":
            return Reply.tool_calls(*(spawned(n) for n in range(7)))
        if last.get("tool_call_id") == "s6":
            return Reply.tool_calls(ToolCall("wait_children", {}, id="w"))
        return Reply.text("Order 0 is delivered; the rest were not looked up.")

    rig.fake.responder = respond
    return await rig.run(spec, "Where are orders 0 to 6?")


async def limit_refused_before_patch(rig: Rig) -> RunHandle:
    """``_limit_refused`` recorded before the patch ``psych-limit-refusals-no-failure``: the
    six refusals counted as ``spawn`` failing, which was withheld at three and failed the
    Run at six (the default hard stop)."""
    return await _limit_refused(rig)


async def limit_refused_no_streak(rig: Rig) -> RunHandle:
    """``_limit_refused`` with the patch ``psych-limit-refusals-no-failure`` (its marker at
    the first refusal): the refusals count toward no failure streak, answered."""
    return await _limit_refused(rig)


async def _repeat_calls_in_a_turn(rig: Rig) -> RunHandle:
    """Four identical ``lookup_order`` calls in one turn under ``repeat_call_threshold=2``
    and ``repeat_call_hard_stop=3``."""
    spec = (
        rig.agent("rep")
        .tool("lookup_order")
        .limits(repeat_call_threshold=2, repeat_call_hard_stop=3)
        .build()
    )

    def respond(body: dict[str, Any]) -> Reply:
        if body["messages"][-1]["role"] == "user":
            same = (ToolCall("lookup_order", {"order_id": "7"}, id=f"r{n}") for n in range(4))
            return Reply.tool_calls(*same)
        return Reply.text("Order 7 is delivered.")

    rig.fake.responder = respond
    return await rig.run(spec, "Where is order 7?")


async def repeat_calls_in_a_turn_before_patch(rig: Rig) -> RunHandle:
    """``_repeat_calls_in_a_turn`` recorded before the patch ``psych-repeat-calls-in-a-turn``:
    the four calls ran together, and the Run answered."""
    return await _repeat_calls_in_a_turn(rig)


async def repeat_calls_in_a_turn(rig: Rig) -> RunHandle:
    """``_repeat_calls_in_a_turn`` with the patch ``psych-repeat-calls-in-a-turn`` (its
    marker as the batch starts): the first two calls run, the third and fourth wait for
    them and are refused, and the third refusal stops the Run at the hard stop, FAILED."""
    return await _repeat_calls_in_a_turn(rig)


async def _queued_past_an_expiry(rig: Rig) -> RunHandle:
    """Three identical ``tally_stock`` calls under ``repeat_call_threshold=2`` beside a
    ``delete_order`` whose approval expires while the first two tally (each tally another
    result, so the third is no repeat): the Run settles ABANDONED."""
    GATES.clear()
    rig.settings.policy = RulePolicy(destructive="ask")
    spec = (
        rig.agent("stock")
        .tool("delete_order")
        .tool("tally_stock")
        .limits(repeat_call_threshold=2)
        .suspension(approval_expires_seconds=1)
        .build()
    )
    same = (ToolCall("tally_stock", {"item": "bolts"}, id=f"n{n}") for n in range(3))
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("delete_order", {"order_id": "1"}, id="c-del"), *same)
    )
    async with rig.worker():
        run = await rig.client.dispatch(spec, "Delete order 1, tally bolts", scope=SCOPE)
        gate = await rig.started("tally_stock")

        async def expired() -> bool:
            records = (await rig.client.records(run, scope=SCOPE)).records
            return any(r.kind == "suspension_expired" for r in records)

        await rig.until(expired, "the approval's expiry")
        gate.open.set()
        await rig.settle(run)
    return run


async def repeat_call_queued_past_an_expiry_before_patch(rig: Rig) -> RunHandle:
    """``_queued_past_an_expiry`` recorded before the patch ``psych-queued-calls-stop`` (at
    354ab34 with the fix reverted): the third call, queued behind the first two, tallied
    once they were done, after the expiry. The old branch, never re-recorded."""
    return await _queued_past_an_expiry(rig)


async def repeat_call_queued_past_an_expiry(rig: Rig) -> RunHandle:
    """``_queued_past_an_expiry`` with the patch ``psych-queued-calls-stop`` (its marker as
    the batch starts): the third call starts nothing once the first two are done."""
    return await _queued_past_an_expiry(rig)


# --- continue-as-new: one chain's executions, each its own history -----------------------


@dataclass(frozen=True)
class ExecutionHandle(RunHandle):
    """A Run and which of its executions (Temporal run id) a shape records."""

    execution: str = ""


async def _continued(rig: Rig, execution: int) -> ExecutionHandle:
    """A Run continued as new at every turn boundary: execution 1 waits on an approval
    and takes a steer that crosses the cut, 2 calls a tool, 3 answers."""
    spec = rig.agent("orders").tool("delete_order").tool("inventory").build()
    rig.settings.policy = RulePolicy(destructive="ask")
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("delete_order", {"order_id": "42"}, id="c1")),
        Reply.tool_calls(ToolCall("inventory", {}, id="c2")),
        Reply.text("Done."),
    )
    async with rig.worker():
        run = await rig.client.dispatch(
            spec, "Delete order 42", scope=SCOPE, continue_after_events=1
        )
        pending = await rig.suspended(run)
        await rig.client.steer(run, "Then check the inventory.", scope=SCOPE)
        await rig.client.approve(run, pending.id, scope=SCOPE)
        await rig.settle(run)
        page = await rig.client.records(run, scope=SCOPE, after=10_000)
        current = await rig.env.client.get_workflow_handle(run.workflow_id).describe()
    chain = [segment.run_id for segment in page.earlier] + [current.run_id]
    assert len(chain) == 3, f"expected a chain of 3 executions, got {len(chain)}"
    return ExecutionHandle(**dataclasses.asdict(run), execution=chain[execution - 1])


async def _workflow_continued(rig: Rig, execution: int) -> ExecutionHandle:
    """A WorkflowRun continued as new between its two steps: execution 1 looks an order up
    and continues (patch psych-workflow-continue-as-new), 2 takes the carried outputs and
    catalogue, waits for the approval of its tool step, and completes."""
    rig.settings.policy = RulePolicy(destructive="ask")
    spec = (
        _workflow(rig, "continuing")
        .tool("lookup_order")
        .tool("delete_order")
        .tool_step("look", "lookup_order", {"order_id": "42"})
        .tool_step("delete", "delete_order", {"order_id": "42"})
        .build()
    )
    async with rig.worker():
        run = await rig.client.dispatch(
            spec, "Delete order 42", scope=SCOPE, continue_after_events=1
        )
        pending = await rig.suspended(run)
        await rig.client.approve(run, pending.id, scope=SCOPE)
        await rig.settle(run)
        page = await rig.client.records(run, scope=SCOPE, after=10_000)
        current = await rig.env.client.get_workflow_handle(run.workflow_id).describe()
    chain = [segment.run_id for segment in page.earlier] + [current.run_id]
    assert len(chain) == 2, f"expected a chain of 2 executions, got {len(chain)}"
    return ExecutionHandle(**dataclasses.asdict(run), execution=chain[execution - 1])


async def workflow_continued_first_execution(rig: Rig) -> RunHandle:
    return await _workflow_continued(rig, 1)


async def workflow_continued_last_execution(rig: Rig) -> RunHandle:
    return await _workflow_continued(rig, 2)


async def continued_first_execution(rig: Rig) -> RunHandle:
    return await _continued(rig, 1)


async def continued_middle_execution(rig: Rig) -> RunHandle:
    return await _continued(rig, 2)


async def continued_last_execution(rig: Rig) -> RunHandle:
    return await _continued(rig, 3)


@dataclass(frozen=True)
class Shape:
    name: str
    server: Server
    record: Callable[[Rig], Awaitable[RunHandle]]


# --- local tool calls (issue 27) ------------------------------------------------------------


async def local_tool_calls_concurrent(rig: Rig) -> RunHandle:
    """Two concurrent local calls of different durations (the first started finishes last),
    then one local call in a turn of its own, answered: one workflow task per turn."""
    rig.fake.enqueue(
        Reply.tool_calls(
            ToolCall("count_stock", {"item": "bolts", "seconds": 0.6}),
            ToolCall("count_stock", {"item": "nuts", "seconds": 0.05}),
        ),
        Reply.tool_calls(ToolCall("count_stock", {"item": "gears", "seconds": 0.0})),
        Reply.text("7 of each."),
    )
    return await rig.run(rig.agent("stock").tool("count_stock").build(), "Count the stock.")


async def local_and_activity_tool_calls(rig: Rig) -> RunHandle:
    """A local call and a normal activity (a tool not safe to repeat) in one turn."""
    rig.fake.enqueue(
        Reply.tool_calls(
            ToolCall("count_stock", {"item": "bolts", "seconds": 0.3}),
            ToolCall("lookup_order", {"order_id": "42"}),
        ),
        Reply.text("Bolts in stock; order 42 delivered."),
    )
    spec = rig.agent("stock").tool("count_stock").tool("lookup_order").build()
    return await rig.run(spec, "Stock and order 42?")


async def local_tool_timed_out(rig: Rig) -> RunHandle:
    """A local call that outlives its local_seconds: retried as a tool safe to repeat, then
    the error reaches the model, answered."""
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("slow_count", {"item": "bolts"})),
        Reply.text("The count timed out."),
    )
    return await rig.run(rig.agent("stock").tool("slow_count").build(), "Count the bolts.")


class _RevokedAfter:
    """A tenant permits port that permits everything for its first ``until`` answers (the
    Run's catalogue), then only ``lookup_order``: a permit revoked while the Run works."""

    def __init__(self, until: int) -> None:
        self.until = until
        self.asked = 0

    async def permitted(self, tenant: str, source: PermitSource) -> tuple[str, ...] | None:
        self.asked += 1
        return None if self.asked <= self.until else ("lookup_order",)


async def tool_permit_revoked(rig: Rig) -> RunHandle:
    """``count_orders`` revoked after the catalogue offered it: its call is denied by the
    worker's permits (the outcome marked ``unpermitted``), the next model call leaves it out
    and carries a note; the model calls it anyway and the Run refuses it itself (no
    activity), answered."""
    rig.settings = dataclasses.replace(rig.settings, permits=_RevokedAfter(until=1))
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("count_orders", {"customer": "ada"}, id="c1")),
        Reply.tool_calls(ToolCall("count_orders", {"customer": "ada"}, id="c2")),
        Reply.text("I may not count orders any more."),
    )
    spec = rig.agent("counter").tool("lookup_order").tool("count_orders").build()
    return await rig.run(spec, "How many orders has Ada?")


async def _permit_revoked_continued(rig: Rig, execution: int) -> ExecutionHandle:
    """``count_orders`` revoked after the catalogue offered it, the Run continued as new
    once: execution 1's call of it is denied by the worker's permits (the outcome marked
    ``unpermitted``), then ``lookup_order`` runs and the history is long enough; 2's
    catalogue leaves ``count_orders`` out, the model calls it anyway and then answers
    (the next model call carries what it read)."""
    rig.settings = dataclasses.replace(rig.settings, permits=_RevokedAfter(until=1))
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("count_orders", {"customer": "ada"}, id="c1")),
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "42"}, id="c2")),
        Reply.tool_calls(ToolCall("count_orders", {"customer": "ada"}, id="c3")),
        Reply.text("I may not count orders any more."),
    )
    spec = rig.agent("counter").tool("lookup_order").tool("count_orders").build()
    async with rig.worker():
        # Read where a turn's model call answered: past 18 events at execution 1's second
        # answer, not at its first, nor at either of execution 2's.
        run = await rig.client.dispatch(
            spec, "How many orders has Ada?", scope=SCOPE, continue_after_events=18
        )
        await rig.settle(run)
        page = await rig.client.records(run, scope=SCOPE, after=10_000)
        current = await rig.env.client.get_workflow_handle(run.workflow_id).describe()
    chain = [segment.run_id for segment in page.earlier] + [current.run_id]
    assert len(chain) == 2, f"expected a chain of 2 executions, got {len(chain)}"
    return ExecutionHandle(**dataclasses.asdict(run), execution=chain[execution - 1])


async def tool_permit_revoked_told(rig: Rig) -> RunHandle:
    """``tool_permit_revoked`` recorded with patch psych-unpermitted-told (its marker at the
    start): the note says the tool is not offered again unless its permit is given back."""
    return await tool_permit_revoked(rig)


async def tool_permit_revoked_continued(rig: Rig) -> RunHandle:
    """The second execution of ``_permit_revoked_continued`` with patch
    psych-unpermitted-told: the model's call of the tool its catalogue left out is denied
    with the permits' words, not an unknown tool's."""
    return await _permit_revoked_continued(rig, 2)


async def tool_permit_revoked_continued_before_patch(rig: Rig) -> RunHandle:
    """Recorded at 9d31192, before patch psych-unpermitted-told: the second execution's
    catalogue leaves ``count_orders`` out, and the model's call of it reads as an unknown
    tool's (an error)."""
    return await _permit_revoked_continued(rig, 2)


async def local_external_wait_beside_local_call(rig: Rig) -> RunHandle:
    """A local call that returns an external wait at once, beside a slower local call
    started before it: the wait's commands come only after both resolved; completed by
    token, answered."""
    rig.fake.enqueue(
        Reply.tool_calls(
            ToolCall("count_stock", {"item": "bolts", "seconds": 0.5}),
            ToolCall("hold_slot", {"slot": "am"}),
        ),
        Reply.text("Slot held, bolts in stock."),
    )
    spec = rig.agent("slots").tool("hold_slot").tool("count_stock").build()
    async with rig.worker():
        run = await rig.client.dispatch(spec, "Hold the morning slot.", scope=SCOPE)
        pending = await rig.suspended(run)
        await rig.client.complete(run, pending.id, {"held": True}, scope=SCOPE)
        await rig.settle(run)
    return run


async def roles_apart_local_tool(rig: Rig) -> RunHandle:
    """A Run dispatched roles apart: a tool registered local still runs as an activity on
    the tools role's queue."""
    apart = PsychClient(
        rig.env.client,
        store=rig.client.store,
        task_queue=rig.client.task_queue,
        registry=TOOLS,
        roles_apart=True,
    )
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("count_stock", {"item": "bolts", "seconds": 0.0})),
        Reply.text("7 bolts."),
    )
    async with rig.worker():
        spec = rig.agent("stock").tool("count_stock").build()
        run = await apart.dispatch(spec, "Count the bolts.", scope=SCOPE)
        await rig.settle(run)
    return run


async def workflow_local_tool_step(rig: Rig) -> RunHandle:
    """WorkflowRun: a tool step whose tool is registered local: one marker, no activity."""
    spec = (
        _workflow(rig, "stock-flow")
        .tool("count_stock")
        .tool_step("count", "count_stock", {"item": "bolts", "seconds": 0.0})
        .build()
    )
    return await rig.run(spec, "Count.")


# --- a Run polled from its dispatch (the SDK's local-resolution race) ---------------------


async def workflow_polled_from_dispatch(rig: Rig) -> RunHandle:
    """WorkflowRun whose first step waits for approval, polled from its dispatch: the
    catalogue's marker is sent with the first task's query answers and the workflow learns
    of it in the next (tests/e2e/_local_split.py); the deadline timer is kept (patch
    ``psych-local-resolution-safe``), approved, completed. Tried until a Run gets that shape."""
    spec = (
        _workflow(rig, "polled")
        .tool("delete_order")
        .tool_step("delete", "delete_order", {"order_id": "42"})
        .build()
    )
    rig.settings.policy = RulePolicy(destructive="ask")

    async def approve(run: RunHandle) -> None:
        await rig.client.approve(run, (await rig.suspended(run)).id, scope=SCOPE)
        await rig.settle(run)

    for _ in range(SPLIT_ATTEMPTS):
        run = await polled_from_dispatch(
            rig.client, spec, "Delete order 42", scope=SCOPE, worker=rig.worker, then=approve
        )
        history = await rig.env.client.get_workflow_handle(run.workflow_id).fetch_history()
        if resolved_after_its_marker(history):
            return run
    raise RuntimeError(f"in {SPLIT_ATTEMPTS} Runs the catalogue never resolved after its marker")


SPLIT_ATTEMPTS = 10
"""Runs ``workflow_polled_from_dispatch`` tries for the race (most Runs get it)."""


_ON: list[tuple[Server, Callable[[Rig], Awaitable[RunHandle]]]] = [
    ("dev", plain_answer),
    ("dev", code_and_http_tools),
    ("dev", large_result_read_back),
    ("dev", foreign_handle_refused),
    ("dev", skill_loaded),
    ("dev", malformed_and_unknown_tool_calls),
    ("dev", over_the_per_turn_call_cap),
    ("dev", transient_failure_then_fallback),
    ("dev", retry_budget_exhausted),
    ("dev", non_transient_failure),
    ("dev", failure_streak_withheld),
    ("dev", failure_streak_hard_stop),
    ("dev", repeat_guard_refusal),
    ("dev", repeat_guard_hard_stop),
    ("dev", max_turns_stop),
    ("dev", version_mismatch),
    ("dev", unknown_after_crash),
    ("dev", rerun_after_crash),
    ("time-skipping", deadline_force_settled),
    ("time-skipping", deadline_during_tool_call),
    ("time-skipping", deadline_during_retry_wait),
    ("dev", approval_granted),
    ("dev", approval_granted_by_signal),
    ("dev", approval_denied),
    ("time-skipping", approval_expired),
    ("dev", question_answered),
    ("dev", question_without_text),
    ("dev", external_wait_completed),
    ("dev", max_steps_stop),
    ("dev", policy_denied),
    ("dev", per_call_policy),
    ("time-skipping", question_expired),
    ("time-skipping", external_wait_expired),
    ("time-skipping", approval_expired_beside_external_wait_before_patch),
    ("time-skipping", approval_expired_beside_external_wait),
    ("dev", abort_during_model_call),
    ("dev", workflow_cancelled),
    ("dev", delegate_answered),
    ("time-skipping", delegate_expired),
    ("dev", abort_during_interruptible_call),
    ("dev", abort_during_non_interruptible_call),
    ("dev", abort_while_suspended),
    ("dev", steer_and_follow_up),
    ("dev", next_run),
    ("dev", workflow_three_steps),
    ("dev", workflow_step_failed),
    ("dev", workflow_agent_step_failed),
    ("dev", workflow_tool_step_approved),
    ("time-skipping", workflow_tool_step_expired),
    ("dev", workflow_agent_step_approved),
    ("dev", workflow_agent_step_question),
    ("dev", workflow_abort_during_agent_step),
    ("dev", workflow_steer_forwarded),
    ("dev", workflow_abort_during_tool_step),
    ("dev", mcp_discovery_and_call),
    ("dev", mcp_over_sse),
    ("dev", mcp_optional_unavailable),
    ("dev", mcp_required_unreachable),
    ("dev", mcp_list_changed),
    ("dev", mcp_deferred_search),
    ("dev", mcp_abort_during_call),
    ("dev", workflow_mcp_tool_step),
    # the MCP protocol of 2026-07-28 (issue 25, item 6)
    ("dev", mcp_input_required_answered),
    ("dev", mcp_authorization_at_turn),
    ("dev", mcp_authorization_at_call),
    ("dev", workflow_mcp_authorization),
    ("dev", mcp_authorization_expired),
    # A2A peers as tools (issue 24, item 1)
    ("dev", a2a_peer_called),
    ("dev", a2a_peer_task_waited),
    ("dev", a2a_peer_task_completed_by_hand),
    ("dev", a2a_peer_task_completed_by_hand_before_patch),
    ("dev", a2a_optional_unavailable),
    ("dev", a2a_required_unreachable),
    ("dev", a2a_cards_blob_lost_before_patch),
    ("dev", a2a_cards_blob_lost),
    ("dev", a2a_cards_timed_out),
    ("dev", a2a_cards_timed_out_before_patch),
    ("dev", workflow_mcp_discovery_timed_out),
    ("dev", workflow_mcp_discovery_timed_out_before_patch),
    ("dev", workflow_start_cards_settle),
    # A2A, the parts left (issue 24): a peer's question to the person; abort cancels
    ("dev", a2a_peer_question_answered),
    ("dev", a2a_peer_question_after_wait),
    ("dev", a2a_peer_task_canceled),
    ("dev", a2a_peer_question_canceled),
    ("dev", a2a_peer_question_canceled_before_patch),
    ("dev", a2a_poll_through_failures),
    ("dev", a2a_poll_through_failures_before_patch),
    ("dev", a2a_pushed_read_through_failures),
    ("dev", a2a_pushed_read_through_failures_before_patch),
    ("dev", a2a_peer_task_pushed),
    # tasks, components and context providers
    ("dev", tasks_updated),
    ("dev", component_shown),
    ("dev", context_provided_turn),
    # tool-call hooks (issue 11)
    ("dev", hooked_tool_calls),
    # compaction and threads (issue 10 items 3 and 5)
    ("dev", compaction_applied),
    ("dev", compaction_failed),
    ("dev", compaction_in_bounded_step_before_patch),
    ("dev", compaction_in_bounded_step),
    ("dev", thread_continued),
    # subagents done right (issue 10, item 1)
    ("dev", delegate_failed_child_rolled_up),
    ("dev", delegate_refused_depth),
    ("dev", workflow_agent_step_delegates),
    ("dev", delegate_parent_aborted),
    # spawn (issue 10, item 2)
    ("dev", spawn_and_wait),
    ("dev", spawn_refused),
    # a lead Version with fallbacks under a transient budget of 0 spawns (before 12f58df)
    ("dev", spawn_with_unbudgeted_fallbacks),
    # a lead Version with a blank spawn.models entry spawns (before 9964667)
    ("dev", spawn_with_a_blank_envelope_model),
    # max_fanout_per_turn counts spawned children too (issue 26, item 5)
    ("dev", fanout_capped),
    # hot path (issue 15): the roles opt-in
    ("dev", one_queue_code_tool),
    ("dev", roles_apart_code_tool),
    # the fleet decides roles (issue 26, item 2)
    ("dev", fleet_roles_apart_code_tool),
    # local tool calls (issue 27)
    ("dev", local_tool_calls_concurrent),
    ("dev", local_and_activity_tool_calls),
    ("dev", local_tool_timed_out),
    ("dev", local_external_wait_beside_local_call),
    ("dev", roles_apart_local_tool),
    ("dev", workflow_local_tool_step),
    # a Run polled from its dispatch: the local resolution a task after its marker
    ("dev", workflow_polled_from_dispatch),
    # continue-as-new: one chain, each execution its own history
    ("dev", continued_first_execution),
    ("dev", continued_middle_execution),
    ("dev", continued_last_execution),
    # WorkflowRun audit 12-05: text step outputs, steer signals a workflow cannot take
    ("dev", workflow_text_step_output),
    ("dev", workflow_steer_signal_refused),
    ("dev", workflow_steer_signal_before_refusal),
    ("dev", workflow_steer_signal_tool_step),
    # a long WorkflowRun continues as new between two steps
    ("dev", workflow_continued_first_execution),
    ("dev", workflow_continued_last_execution),
    ("dev", catalog_tool_not_registered),
    ("dev", catalog_timed_out_before_settles),
    # two calls of one turn under one id (suspensions audit 12-05)
    ("dev", approval_under_a_repeated_id),
    # limits audit 12-05: calls the Run does not run are no failures of their tool
    ("dev", over_the_per_turn_call_cap_no_streak),
    # children audit 12-05: patch psych-children-bounded
    ("dev", delegate_bounded),
    # metering audit 12-05: a cancelled workflow's agent step hands back its totals
    ("dev", workflow_cancelled_during_agent_step_before_wind_down),
    ("dev", workflow_cancelled_during_agent_step),
    # a cancelled agent's children hand back their totals (patch psych-children-wind-down)
    ("dev", delegate_parent_cancelled_before_wind_down),
    ("dev", delegate_parent_cancelled),
    ("dev", spawn_parent_cancelled),
    # metering audit 12-05: an attempt that made no request is no model call
    ("dev", mcp_authorization_at_turn_uncounted),
    ("dev", mcp_required_unreachable_uncounted),
    # hooks audit 12-05: an A2A peer task's polls carry the arguments a pre hook rewrote
    ("dev", a2a_poll_ran_arguments),
    # limits audit 12-05: a model retry is a step (patch psych-retries-within-max-steps)
    ("dev", max_steps_during_retries),
    ("dev", max_steps_during_retries_before_patch),
    # a workflow's outputs are bounded (patch psych-workflow-outputs-bounded, at the start)
    ("dev", workflow_outputs_past_bound),
    ("dev", agent_start_outputs_bounded),
    # subagents audit 12-06: a lead's clock runs while its subagent works
    ("dev", delegate_past_parents_deadline),
    # subagents audit 12-06: a child's large answer is stored, shown as a handle
    ("dev", delegate_large_answer_stored),
    # hooks audit 12-06: an external wait's payload goes through the post hooks, stored
    ("dev", external_wait_completed_hooked),
    # review 12-06: an expiry also ends a wait begun after it by a call then running
    ("dev", approval_expired_beside_open_call),
    # limits audit 12-06: children past max_fanout_per_turn are no failures of their tool
    ("dev", fanout_refused_before_patch),
    ("dev", fanout_refused_no_streak),
    # audit 12-06: children the Run's limits refuse are no failures of their tool
    ("dev", limit_refused_before_patch),
    ("dev", limit_refused_no_streak),
    # audit 12-06: identical calls of one turn are held to the repeat guard
    ("dev", repeat_calls_in_a_turn_before_patch),
    ("dev", repeat_calls_in_a_turn),
    # review 12-06: a consent refused at the authorization server ends the wait, and is told
    ("dev", mcp_consent_refused_at_turn),
    ("dev", mcp_consent_refused_at_call),
    # review 12-06: a blank answer by signal is ignored, the question still waits
    ("dev", question_blank_signal_ignored),
    # review 12-06: a queued identical call starts nothing after an abort or an expiry
    ("dev", repeat_call_queued_past_an_expiry_before_patch),
    ("dev", repeat_call_queued_past_an_expiry),
    # review 12-06: an optional server refused at a turn is told to the model (no command)
    ("dev", mcp_consent_refused_optional_at_turn),
    # review 12-06: that note behind psych-consent-refused-note (its head is derived)
    ("dev", mcp_consent_refused_optional_at_turn_noted),
    # a permit revoked mid-Run: the tool offered no more, the model told (no patch: only
    # an outcome marked unpermitted, which no earlier worker sent, takes that path)
    ("dev", tool_permit_revoked),
    # ... and continued as new: the call of a tool the next catalogue left out for the
    # permits read as an unknown tool's (the old branch of psych-unpermitted-told)
    ("dev", tool_permit_revoked_continued_before_patch),
    # ... both behind psych-unpermitted-told: the note true across continue-as-new, and
    # the call of a tool the catalogue left out for the permits denied as not permitted
    ("dev", tool_permit_revoked_told),
    ("dev", tool_permit_revoked_continued),
    # ... a WorkflowRun's start too: that marker alone, standing for the older start patches
    ("dev", workflow_start_unpermitted_told),
    # a final answer cut at the model's output limit: "answered" before the patch
    ("dev", answer_cut_off_before_patch),
    # ... and behind psych-cut-answer-named: the Run's reason says the answer is cut
    ("dev", answer_cut_off),
    # a cut answer in the last turn, a follow-up waiting: STOPPED max_turns before the patch
    ("dev", answer_cut_off_stopped_before_patch),
    # ... and behind psych-cut-answer-stopped-named: the reason names the cut too
    ("dev", answer_cut_off_stopped),
    # a workflow's agent step cut short: "completed: 2 steps" before the patch
    ("dev", workflow_step_cut_off_before_patch),
    # ... and behind psych-workflow-cut-step-named: the Run's reason names the step
    ("dev", workflow_step_cut_off),
    # a child's answer cut short: the lead read it as whole before the patch
    ("dev", delegate_answer_cut_off_before_patch),
    ("dev", spawn_answer_cut_off_before_patch),
    # ... and behind psych-child-cut-answer-told: the lead reads that it is cut
    ("dev", delegate_answer_cut_off),
    ("dev", spawn_answer_cut_off),
    # load_skill's bad calls and a body over large_result_bytes: all "ok", whole, before
    ("dev", load_skill_checked_before_patch),
    # ... and behind psych-load-skill-checked: errors, and the body stored (a handle)
    ("dev", load_skill_checked),
    # Recorded before psych-answer-bounded (the old branch); never re-record it.
    ("dev", question_answer_bounded_before_patch),
    ("dev", question_answer_bounded),
    # Recorded before psych-rejection-note-bounded (the old branch); never re-record it.
    ("dev", approval_note_bounded_before_patch),
    ("dev", approval_note_bounded),
    # Recorded before psych-consent-note-bounded (the old branch); never re-record it.
    ("dev", mcp_consent_note_bounded_before_patch),
    ("dev", mcp_consent_note_bounded),
    # Recorded before psych-rejection-unstored-read (the old branch); never re-record it.
    ("dev", approval_note_unstored_before_patch),
    ("dev", approval_note_unstored),
    # Recorded before psych-answer-unstored-read (the old branch); never re-record it.
    ("dev", question_answer_unstored_before_patch),
    ("dev", question_answer_unstored),
    # Recorded before psych-child-answer-unstored-read (the old branch); never re-record it.
    ("dev", delegate_answer_unstored_before_patch),
    ("dev", delegate_answer_unstored),
    # Recorded before psych-a2a-artifact-handles (the old branch); never re-record it.
    ("dev", a2a_artifact_handle_read_before_patch),
    ("dev", a2a_artifact_handle_read),
]
SHAPES = tuple(Shape(fn.__name__, server, fn) for server, fn in _ON)
"""Every shape with a committed history, in recording order."""


async def record(shapes: Sequence[Shape], out: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="psych-record-") as tmp:
        dev = await start_dev_server() if any(s.server == "dev" for s in shapes) else None
        try:
            for shape in shapes:
                started = time.monotonic()
                home = Path(tmp) / shape.name
                if shape.server == "dev":
                    assert dev is not None
                    history = await _record_on(dev, shape, home)
                else:
                    # A server of its own: a Run that settles with an activity open leaves
                    # the test server's clock locked for good (see test_deadline.py).
                    env = await start_time_skipping_server()
                    try:
                        history = await _record_on(env, shape, home)
                    finally:
                        await env.shutdown()
                _write(out / f"{shape.name}.json", history.to_json() + "\n")
                print(f"{shape.name}: {time.monotonic() - started:.1f} s", flush=True)
        finally:
            if dev is not None:
                await dev.shutdown()


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


async def _record_on(env: WorkflowEnvironment, shape: Shape, home: Path) -> WorkflowHistory:
    async with rig(env, shape.server, home) as r:
        run = await shape.record(r)
    # A continued Run's shapes name the execution they record (else the latest).
    execution = run.execution if isinstance(run, ExecutionHandle) else None
    handle = env.client.get_workflow_handle(run.workflow_id, run_id=execution)
    return await handle.fetch_history()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--overwrite", nargs="+", metavar="NAME", default=[])
    parser.add_argument("--list", action="store_true", help="list the shapes and exit")
    parser.add_argument("--out", type=Path, default=HISTORIES)
    args = parser.parse_args(argv)
    names = {shape.name for shape in SHAPES}
    if args.list:
        for shape in SHAPES:
            have = "recorded" if (args.out / f"{shape.name}.json").exists() else "missing"
            print(f"{shape.name:40} {shape.server:14} {have}")
        return
    unknown = sorted(set(args.overwrite) - names)
    if unknown:
        sys.exit(f"no such shape: {', '.join(unknown)} (see --list)")
    chosen = [
        s for s in SHAPES if s.name in args.overwrite or not (args.out / f"{s.name}.json").exists()
    ]
    if not chosen:
        print("every shape has a history; name any to re-record with --overwrite")
        return
    asyncio.run(record(chosen, args.out))


if __name__ == "__main__":
    main()
