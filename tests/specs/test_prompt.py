"""System prompt assembly: fixed block order, empty blocks left out."""

from __future__ import annotations

from typing import Any

from psych_runtime.specs import (
    AgentSpec,
    ModelRef,
    Skill,
    SubagentRef,
    TaskItem,
    system_prompt,
    with_context,
)
from psych_runtime.specs._prompt import ANSWER_STYLES

TASKS = (TaskItem("Find the order", "completed"), TaskItem("Refund it", "in_progress"))


def agent(**fields: Any) -> AgentSpec:
    return AgentSpec(**{"name": "a", "model": ModelRef(model="m"), **fields})


def full_agent(**fields: Any) -> AgentSpec:
    return agent(
        **{
            "instructions": "  INSTRUCTIONS: help the customer.  ",
            "answer_style": "concise",
            "skills": [
                Skill(name="zz-tone", description="Voice of the brand", body="..."),
                Skill(name="refund-policy", description="When a refund is allowed", body="..."),
            ],
            "subagents": [
                SubagentRef(
                    name="billing", description="Handles invoices and payments.", spec=agent()
                )
            ],
            "tasks_enabled": True,
            **fields,
        }
    )


def test_blocks_in_the_documented_order() -> None:
    prompt = system_prompt(full_agent(), tasks=TASKS, context=["CONTEXT ONE", "CONTEXT TWO"])
    blocks = prompt.split("\n\n")
    assert blocks[0] == "INSTRUCTIONS: help the customer."
    assert blocks[1] == ANSWER_STYLES["concise"]
    assert blocks[2].startswith("Skills:")
    assert blocks[3].startswith("Subagents:")
    assert blocks[4].startswith("Task list:")
    assert blocks[5:] == ["CONTEXT ONE", "CONTEXT TWO"]


def test_skills_index_lists_name_and_description_not_body() -> None:
    spec = agent(skills=[Skill(name="s", description="When to use it", body="SECRET BODY")])
    prompt = system_prompt(spec)
    assert "load_skill" in prompt
    assert "- s: When to use it" in prompt
    assert "SECRET BODY" not in prompt
    lines = system_prompt(full_agent()).split("\n\n")[2].splitlines()
    assert lines[1:] == [
        "- refund-policy: When a refund is allowed",
        "- zz-tone: Voice of the brand",
    ]


def test_subagents_index() -> None:
    block = system_prompt(full_agent()).split("\n\n")[3]
    assert "delegate" in block
    assert "- billing: Handles invoices and payments." in block.splitlines()


def test_concise_adds_a_block_and_none_adds_nothing() -> None:
    concise = system_prompt(agent(instructions="Hi.", answer_style="concise"))
    plain = system_prompt(agent(instructions="Hi."))
    assert plain == "Hi."
    assert concise == "Hi.\n\n" + ANSWER_STYLES["concise"]
    assert "concise" in ANSWER_STYLES["concise"]


def test_task_list_only_when_tasks_enabled() -> None:
    on = system_prompt(agent(instructions="Hi.", tasks_enabled=True), tasks=TASKS)
    assert on == "Hi.\n\nTask list:\n- [completed] Find the order\n- [in_progress] Refund it"
    off = system_prompt(agent(instructions="Hi.", tasks_enabled=False), tasks=TASKS)
    assert off == "Hi."
    empty = system_prompt(agent(instructions="Hi.", tasks_enabled=True), tasks=())
    assert empty == "Hi."


def test_context_blocks_come_last_and_empty_ones_are_dropped() -> None:
    prompt = system_prompt(
        agent(instructions="Hi.", tasks_enabled=True),
        tasks=TASKS[:1],
        context=["  first  ", "", "   ", "second"],
    )
    assert prompt == "Hi.\n\nTask list:\n- [completed] Find the order\n\nfirst\n\nsecond"


def test_empty_blocks_omitted() -> None:
    assert system_prompt(agent()) == ""
    assert system_prompt(agent(), context=["only context"]) == "only context"
    no_instructions = system_prompt(agent(answer_style="concise"))
    assert no_instructions == ANSWER_STYLES["concise"]
    prompt = system_prompt(full_agent(instructions="", skills=[], subagents=[]), tasks=TASKS)
    assert prompt.split("\n\n")[0] == ANSWER_STYLES["concise"]
    assert prompt.split("\n\n")[1].startswith("Task list:")
    assert "\n\n\n" not in prompt


def test_prefix_is_stable_across_turns() -> None:
    spec = full_agent()
    first = system_prompt(spec, tasks=TASKS[:1], context=["turn one"])
    second = system_prompt(spec, tasks=TASKS, context=["turn two"])
    prefix = system_prompt(spec)
    assert first.startswith(prefix + "\n\n")
    assert second.startswith(prefix + "\n\n")


def test_the_context_blocks_are_joined_by_one_function() -> None:
    # The model activity holds the Run's prompt text, not its Spec: it appends a call's
    # blocks with with_context, which system_prompt uses for its last block too.
    spec = full_agent()
    blocks = ["  turn one ", "", "more"]
    assert system_prompt(spec, tasks=TASKS, context=blocks) == with_context(
        system_prompt(spec, tasks=TASKS), blocks
    )
    assert with_context("", ["only"]) == "only"
    assert with_context("", ["", "  "]) == ""
