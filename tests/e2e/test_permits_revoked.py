"""A permit revoked while a Run works: the tool stops being offered once a call of it is
refused for it, and the permits check of a quick local tool is no part of its
``local_seconds``. Real Runs on the dev server with the fake model; the worker's permits
are a port given in code (``WorkerSettings.permits``)."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from psych_runtime.specs import AgentBuilder, PermitSource, WorkflowBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers import run_worker
from psych_runtime.workflows import QUERY_STATE, RunStatus

from ._permits import Revoking, mail_sender, mailer
from .conftest import Harness


def offered(request: dict[str, Any]) -> list[str]:
    """The tool names one model request offered (but ``read_tool_output``, always there)."""
    names = (tool["function"]["name"] for tool in request.get("tools", []))
    return sorted(name for name in names if name != "read_tool_output")


def said(request: dict[str, Any]) -> list[str]:
    """The text of every message one model request carried."""
    return [str(message.get("content")) for message in request["messages"]]


def lookup_order(order_id: str) -> str:
    """Look up an order."""
    return f"order {order_id}: delivered"


MAIL_REFUSED = "code tool 'send_mail' is not permitted to tenant 'acme'"
PING_REFUSED = "http tool 'ping' is not permitted to tenant 'acme'"


def withdrawn(tool: str, refusal: str) -> str:
    """The note of a tool withdrawn for its permit (patch psych-unpermitted-told): true
    across continue-as-new, whose catalogue offers a permit given back."""
    return (
        f"[runtime] The tool {tool} is no longer permitted ({refusal}) and is withdrawn: it "
        "is not offered again unless its permit is given back. Continue without it."
    )


async def test_a_tool_refused_for_its_revoked_permit_is_offered_no_more_and_the_model_told(
    harness: Harness,
) -> None:
    ran: list[str] = []
    spec = mailer(harness, ran, lookup_order)
    # The catalogue asks once for code tools and once for HTTP tools; every ask after it
    # answers that only lookup* (and echo) are permitted.
    permits = Revoking(until=2)
    settings = dataclasses.replace(harness.settings, permits=permits)
    harness.fake.enqueue(
        Reply.tool_calls(
            ToolCall("send_mail", {"to": "a@example.test"}, id="c1"), ToolCall("ping", {}, id="c2")
        ),
        # A model that tries the tool anyway: refused by the Run, the worker not asked.
        Reply.tool_calls(ToolCall("send_mail", {"to": "b@example.test"}, id="c3")),
        Reply.text("I cannot send mail."),
    )
    async with run_worker(harness.env.client, settings):
        run = await harness.client.dispatch(spec, "Mail", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
        state = await harness.client.status(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    # psych status names them, in the order the refusals came, apart from withheld tools.
    assert state.withdrawn_tools == ("send_mail", "ping")
    assert state.withheld_tools == ()
    first, second, third = harness.fake.requests
    assert offered(first) == ["lookup_order", "ping", "send_mail"]
    # Learned from the refusals: neither tool is offered again, and the model is told why.
    assert offered(second) == ["lookup_order"]
    assert said(second)[-2:] == [
        withdrawn("send_mail", MAIL_REFUSED),
        withdrawn("ping", PING_REFUSED),
    ]
    assert offered(third) == ["lookup_order"]
    assert [(c.status, c.result) for c in report.tool_calls] == [
        ("denied", MAIL_REFUSED),
        ("denied", PING_REFUSED),
        ("denied", MAIL_REFUSED),
    ]
    assert ran == []
    # The catalogue's two asks and the first two calls': the third call never left the Run.
    assert permits.asked == [("acme", "code"), ("acme", "http"), ("acme", "code"), ("acme", "http")]


async def test_a_tool_still_refused_after_continue_as_new_is_denied_as_not_permitted(
    harness: Harness,
) -> None:
    ran: list[str] = []
    spec = mailer(harness, ran, lookup_order)
    permits = Revoking(until=2)  # the first catalogue's two asks, then only lookup*
    settings = dataclasses.replace(harness.settings, permits=permits)
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("send_mail", {"to": "a@example.test"}, id="c1")),
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "42"}, id="c2")),
        # A model that remembers the tool: the continued execution's catalogue left it out.
        Reply.tool_calls(ToolCall("send_mail", {"to": "b@example.test"}, id="c3")),
        Reply.text("I cannot send mail."),
    )
    async with run_worker(harness.env.client, settings):
        run = await harness.client.dispatch(
            spec, "Mail", scope=harness.scope, continue_after_events=1
        )
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
        state = await harness.client.status(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    first, second, third, fourth = harness.fake.requests
    assert offered(first) == ["lookup_order", "ping", "send_mail"]
    assert said(second)[-1] == withdrawn("send_mail", MAIL_REFUSED)
    assert offered(second) == offered(third) == ["lookup_order"]
    # What the model reads of the call: the permits' refusal, not an unknown tool.
    told = fourth["messages"][-1]
    assert (told["role"], told["tool_call_id"], told["content"]) == ("tool", "c3", MAIL_REFUSED)
    assert [(c.status, c.result) for c in report.tool_calls] == [
        ("denied", MAIL_REFUSED),
        ("ok", "order 42: delivered"),
        ("denied", MAIL_REFUSED),
    ]
    # The last execution's catalogue left both out: status names them, in the Spec's order.
    assert state.withdrawn_tools == ("ping", "send_mail")
    assert ran == []


async def test_a_continued_workflow_names_the_tools_its_carried_catalogue_left_out(
    harness: Harness,
) -> None:
    # A WorkflowRun carries its catalogue across continue-as-new (it asks the permits once):
    # each execution's state names the tools that catalogue left out for the permits, the
    # last one's too (it resolves none of its own).
    ran: list[str] = []
    spec = (
        WorkflowBuilder("mail-steps", registry=harness.registry)
        .tool(lookup_order)
        .tool(mail_sender(ran))
        .http_tool("ping", description="Ping.", url="http://127.0.0.1:9/ping", method="GET")
        .tool_step("first", "lookup_order", {"order_id": "1"})
        .tool_step("second", "lookup_order", {"order_id": "2"})
        .build()
    )
    settings = dataclasses.replace(harness.settings, permits=Revoking(until=0))
    async with run_worker(harness.env.client, settings):
        run = await harness.client.dispatch(
            spec, "go", scope=harness.scope, continue_after_events=1
        )
        result = await harness.client.result(run, scope=harness.scope)
        page = await harness.client.records(run, scope=harness.scope, after=10_000)
        state = await harness.client.status(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    assert len(page.earlier) == 1  # the second step ran in a continued execution
    assert state.withdrawn_tools == ("ping", "send_mail")
    assert ran == []


async def test_a_runs_state_over_the_wire_leaves_out_withdrawn_tools_while_it_has_none(
    harness: Harness,
) -> None:
    # What a client of a build before RunState.withdrawn_tools reads (extra="forbid"): the
    # worker's payload converter writes the state's JSON without the field while it is
    # empty (the first Run), and with it when the permits refuse a tool (the second's
    # catalogue leaves send_mail and ping out); test_wire_forms.py pins the model.
    ran: list[str] = []
    spec = mailer(harness, ran, lookup_order)
    settings = dataclasses.replace(harness.settings, permits=Revoking(until=2))
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "42"}, id="c1")),
        Reply.text("Delivered."),
        Reply.tool_calls(ToolCall("send_mail", {"to": "a@example.test"}, id="c2")),
        Reply.text("No mail."),
    )
    raw: list[dict[str, Any]] = []
    async with run_worker(harness.env.client, settings):
        for prompt in ("Look up 42", "Mail"):  # the second Run's catalogue: lookup* only
            run = await harness.client.dispatch(spec, prompt, scope=harness.scope)
            result = await harness.client.result(run, scope=harness.scope)
            assert result.status is RunStatus.COMPLETED, result.reason
            handle = harness.env.client.get_workflow_handle(run.workflow_id)
            raw.append(await handle.query(QUERY_STATE, result_type=dict))
    assert "withdrawn_tools" not in raw[0]
    assert raw[1]["withdrawn_tools"] == ["ping", "send_mail"]
    assert ran == []


class SlowToAnswer:
    """A ``TenantPermits`` that permits everything, answering its first ``after`` asks at
    once and every later one after ``seconds`` (a tenant service under load)."""

    def __init__(self, after: int, seconds: float) -> None:
        self.after = after
        self.seconds = seconds
        self.asked = 0

    async def permitted(self, tenant: str, source: PermitSource) -> tuple[str, ...] | None:
        self.asked += 1
        if self.asked > self.after:
            await asyncio.sleep(self.seconds)
        return None


async def test_a_slow_permits_answer_does_not_count_toward_a_local_tools_local_seconds(
    harness: Harness,
) -> None:
    ran: list[str] = []

    async def stock_level(sku: str) -> str:
        """How many of an item are in stock (at once).

        Args:
            sku: The item.
        """
        ran.append(sku)
        return f"{sku}: 12"

    harness.registry.register(stock_level, idempotent=True, read_only=True, local_seconds=0.5)
    spec = (
        AgentBuilder("stock-local", registry=harness.registry)
        .model("fake-model")
        .tool("stock_level")
        .build()
    )
    # The catalogue's ask is answered at once; the call's takes three times local_seconds.
    permits = SlowToAnswer(after=1, seconds=1.5)
    settings = dataclasses.replace(harness.settings, permits=permits)
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("stock_level", {"sku": "bolt"})), Reply.text("12 bolts.")
    )
    async with run_worker(harness.env.client, settings):
        run = await harness.client.dispatch(spec, "Count bolts.", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    [call] = report.tool_calls
    assert (call.status, call.result) == ("ok", "bolt: 12")
    assert ran == ["bolt"]  # one attempt
    assert permits.asked == 2
    told = harness.fake.requests[-1]["messages"][-1]
    assert (told["role"], told["content"]) == ("tool", "bolt: 12")
