"""``psych report RUN --transcript``: the conversation as the model saw it, checked against
what the fake model received, in the terminal's text and as Markdown."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from psych_runtime.activities import FileVersionStore, RulePolicy
from psych_runtime.specs import AgentBuilder, AgentSpec, Scope
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers._loading import load_spec_file
from psych_runtime.workers.console import read_transcript
from psych_runtime.workflows import PsychClient, RunHandle, RunStatus

from .conftest import EXAMPLES, TOOLS_REF, Cli, psych

SCOPE = Scope(tenant="acme")
STEER = "Tell the customer the refund takes three days."
FOLLOW_UP = "Also check order 43."


def client_of(cli: Cli) -> PsychClient:
    return PsychClient(
        cli.env.client,
        store=FileVersionStore(cli.home / "versions"),
        task_queue=cli.task_queue,
        registry=cli.settings.registry,
    )


async def until_suspended(client: PsychClient, run: RunHandle) -> None:
    async with asyncio.timeout(20):
        while True:
            if (await client.status(run, scope=SCOPE)).status is RunStatus.SUSPENDED:
                return
            await asyncio.sleep(0.05)


def assert_in_order(text: str, pieces: list[str]) -> None:
    position = 0
    for piece in pieces:
        found = text.find(piece, position)
        assert found >= 0, f"{piece!r} missing or out of order in:\n{text}"
        position = found + len(piece)


def seen_pieces(messages: list[dict[str, Any]]) -> list[str]:
    """Every text the model was sent, in order: contents and tool-call arguments."""
    pieces: list[str] = []
    for message in messages:
        for line in (message.get("content") or "").splitlines():
            if line.strip():
                pieces.append(line)
        for call in message.get("tool_calls") or ():
            pieces.append(call["function"]["name"])
            pieces.append(call["function"]["arguments"])
    return pieces


def assert_matches_requests(chat: list[dict[str, Any]], requests: list[dict[str, Any]]) -> None:
    """Each request the model got is the transcript up to that point, exactly."""
    assert requests
    for number, request in enumerate(requests, 1):
        sent = request["messages"]
        assert chat[: len(sent)] == sent, f"request {number} differs"
    assert len(chat) == len(requests[-1]["messages"]) + 1  # and the model's last answer
    assert chat[-1]["role"] == "assistant"


async def test_transcript_of_the_demo_run_matches_what_the_model_received(
    cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    # The demo's Run: look the order up, ask before the refund, approved by "ops" with a
    # note; meanwhile "bob" steers the Run and sends a follow-up.
    cli.settings.policy = RulePolicy(tools={"issue_refund": "ask"})
    cli.fake.enqueue(
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "42"}, id="lookup-1")),
        Reply.tool_calls(
            ToolCall("issue_refund", {"order_id": "42", "reason": "broken"}, id="refund-1")
        ),
        Reply.text("I refunded order 42; it takes three days."),
        Reply.text("Order 43 is on its way."),
    )
    client = client_of(cli)
    spec = load_spec_file(cli.spec_file)
    assert isinstance(spec, AgentSpec)
    async with cli.worker():
        run = await client.dispatch(spec, "Please refund order 42, it arrived broken.", scope=SCOPE)
        wid = run.workflow_id
        await until_suspended(client, run)
        for mode, message in (("steer", STEER), ("follow_up", FOLLOW_UP)):
            status, _, err = await psych(
                capsys, "steer", *cli.args(wid, message, "--mode", mode, "--principal", "bob")
            )
            assert status == 0, err
        status, _, err = await psych(
            capsys,
            "approve",
            *cli.args(wid, "refund-1", "--principal", "ops", "--note", "order checked"),
        )
        assert status == 0, err
        await client.result(run, scope=SCOPE)
        transcript = await read_transcript(client, run, scope=SCOPE)
        status, text, err = await psych(capsys, "report", *cli.args(wid, "--transcript"))
        assert (status, err) == (0, "")
        status, markdown, err = await psych(
            capsys, "report", *cli.args(wid, "--transcript", "--format", "md")
        )
        assert (status, err) == (0, "")
        status, _, err = await psych(capsys, "report", *cli.args(wid, "--format", "md"))
        assert status == 1 and err == "psych: --format md is for --transcript\n"

    chat = transcript.chat_messages()
    assert_matches_requests(chat, cli.fake.requests)
    assert [m["role"] for m in chat] == [
        "system", "user",
        "assistant", "tool",
        "assistant", "tool", "user",  # the steering message opens turn 3
        "assistant", "user",  # the follow-up, once the model answered
        "assistant",
    ]  # fmt: skip
    received = cli.fake.requests[-1]["messages"]
    pieces = seen_pieces([*received, chat[-1]])

    assert "\x1b" not in text  # captured output is a pipe: plain lines
    assert_in_order(text, [f"Transcript of {wid}: agent support, completed (answered)"])
    assert_in_order(text, pieces)
    assert_in_order(
        text,
        [
            "── system ──",
            "── user ──",
            "Please refund order 42, it arrived broken.",
            "── assistant (turn 1, gpt-4o-mini) ──",
            '→ lookup_order [lookup-1] {"order_id": "42"}',
            "── tool result lookup_order [lookup-1]: ok ──",
            "── tool result issue_refund [refund-1]: ok ──",
            "approval: approved by ops: order checked",
            '{"refunded": true',
            "── user (steer message from bob) ──",
            STEER,
            "── assistant (turn 3, gpt-4o-mini) ──",
            "I refunded order 42; it takes three days.",
            "── user (follow-up message from bob) ──",
            FOLLOW_UP,
            "── assistant (turn 4, gpt-4o-mini) ──",
            "Order 43 is on its way.",
        ],
    )

    assert_in_order(markdown, pieces)
    assert_in_order(
        markdown,
        [
            f"# Transcript of `{wid}`",
            "agent **support**, completed (answered)",
            "## system\n\n```text\n" + received[0]["content"] + "\n```",
            "## user\n\nPlease refund order 42, it arrived broken.",
            "## assistant (turn 1, gpt-4o-mini)",
            'Tool call `lookup_order` (`lookup-1`):\n\n```json\n{"order_id": "42"}\n```',
            "## tool result lookup_order [lookup-1]: ok\n\n```text\n" + received[3]["content"],
            "## tool result issue_refund [refund-1]: ok\n\n- approval: approved by ops: "
            "order checked\n\n```text\n" + received[5]["content"] + "\n```",
            f"## user (steer message from bob)\n\n{STEER}",
            f"## user (follow-up message from bob)\n\n{FOLLOW_UP}",
            "## assistant (turn 4, gpt-4o-mini)\n\nOrder 43 is on its way.",
        ],
    )


async def test_transcript_shows_a_question_its_answer_and_who_gave_it_fenced_safely(
    cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    asker = (
        AgentBuilder("asker")
        .model("gpt-4o-mini")
        .instructions("Ask before you act.")
        .suspension(may_ask_questions=True)
        .build()
    )
    cli.fake.enqueue(
        Reply.tool_calls(ToolCall("ask_question", {"question": "Which order?"}, id="q1")),
        Reply.text("Order 42 it is."),
    )
    client = client_of(cli)
    async with cli.worker():
        run = await client.dispatch(asker, "Refund my order", scope=SCOPE)
        await until_suspended(client, run)
        status, _, err = await psych(
            capsys, "answer", *cli.args(run.workflow_id, "q1", "``` 42", "--principal", "ann")
        )
        assert status == 0, err
        await client.result(run, scope=SCOPE)
        transcript = await read_transcript(client, run, scope=SCOPE)
        status, markdown, err = await psych(
            capsys, "report", *cli.args(run.workflow_id, "--transcript", "--format", "md")
        )
        assert (status, err) == (0, "")
    assert_matches_requests(transcript.chat_messages(), cli.fake.requests)
    # The answer holds a fence: the transcript's fence is longer, so it stays inside.
    assert_in_order(
        markdown,
        [
            "## tool result ask_question [q1]: ok",
            "- question 'Which order?': answered by ann: ``` 42",
            "````text\n``` 42\n````",
            "## assistant (turn 2, gpt-4o-mini)\n\nOrder 42 it is.",
        ],
    )


async def test_transcript_of_a_workflow_nests_its_agent_steps_conversation(
    cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    welcome = "Welcome aboard, we are glad you are here."
    cli.fake.enqueue(Reply.text(welcome))
    argv = [
        "run",
        str(EXAMPLES / "onboarding-workflow.yaml"),
        *cli.args("--input", "Onboard Ada"),
        "--task-queue",
        cli.task_queue,
        "--store",
        str(cli.home / "versions"),
        "--tools",
        TOOLS_REF,
    ]
    async with cli.worker():
        status, out, err = await psych(capsys, *argv)
        assert status == 0, out + err
        wid = out.split()[1]
        transcript = await read_transcript(client_of(cli), wid, scope=SCOPE)
        status, text, err = await psych(capsys, "report", *cli.args(wid, "--transcript"))
        assert (status, err) == (0, "")
        status, markdown, err = await psych(
            capsys, "report", *cli.args(wid, "--transcript", "--format", "md")
        )
        assert (status, err) == (0, "")
    assert transcript.kind == "workflow" and transcript.messages == ()
    create, greet = transcript.steps
    assert (create.name, create.ok, create.child) == ("create", True, None)
    assert greet.child is not None and greet.child.workflow_id == f"{wid}-step2"
    assert_matches_requests(greet.child.chat_messages(), cli.fake.requests)
    assert "tool result" not in text  # the tool step is a step, no model saw it
    assert_in_order(
        text,
        [
            f"Transcript of {wid}: workflow onboard-customer, completed",
            "── step 1 create (tool) ──",
            'given {"plan": "starter"}',
            '-> ok: {"account": "acct-starter", "plan": "starter"}',
            "── step 2 welcome (agent) ──",
            f"    Transcript of {wid}-step2: agent greeter, completed (answered)",
            "    ── user ──",
            "    Onboard Ada",
            "    ── assistant (turn 1, gpt-4o-mini) ──",
            f"    {welcome}",
        ],
    )
    assert_in_order(
        markdown,
        [
            f"# Transcript of `{wid}`",
            "## Step 1: create (tool)",
            "## Step 2: welcome (agent)",
            f"### Transcript of `{wid}-step2`",
            "#### user\n\nOnboard Ada",
            f"#### assistant (turn 1, gpt-4o-mini)\n\n{welcome}",
        ],
    )


async def test_transcript_shows_a_denied_call_with_who_denied_it_and_the_note(
    cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    cli.settings.policy = RulePolicy(tools={"issue_refund": "ask"})
    cli.fake.enqueue(
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "42"}, id="lookup-1")),
        Reply.tool_calls(
            ToolCall("issue_refund", {"order_id": "42", "reason": "broken"}, id="refund-1")
        ),
        Reply.text("I did not refund order 42."),
    )
    client = client_of(cli)
    spec = load_spec_file(cli.spec_file)
    assert isinstance(spec, AgentSpec)
    async with cli.worker():
        run = await client.dispatch(spec, "Refund order 42", scope=SCOPE)
        await until_suspended(client, run)
        status, _, err = await psych(
            capsys,
            "deny",
            *cli.args(run.workflow_id, "refund-1", "--principal", "ops", "--note", "a manager"),
        )
        assert status == 0, err
        await client.result(run, scope=SCOPE)
        transcript = await read_transcript(client, run, scope=SCOPE)
        status, text, err = await psych(
            capsys, "report", *cli.args(run.workflow_id, "--transcript")
        )
        assert (status, err) == (0, "")
    assert_matches_requests(transcript.chat_messages(), cli.fake.requests)
    told = cli.fake.requests[-1]["messages"][-1]["content"]
    assert_in_order(
        text,
        [
            "── tool result issue_refund [refund-1]: rejected ──",
            "approval: rejected by ops: a manager",
            told.splitlines()[0],
            "── assistant (turn 3, gpt-4o-mini) ──",
            "I did not refund order 42.",
        ],
    )
