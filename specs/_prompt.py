"""Prompt assembly: the system prompt as a pure function of the Spec.

The order is fixed, because any change to it invalidates providers' prompt caches:

1. ``instructions``
2. the answer-style block (nothing when ``answer_style`` is ``None``)
3. the skills index (name and description of each skill; bodies load via ``load_skill``)
4. the subagents index (name and description; reached via ``delegate``)
5. the task list (when ``tasks_enabled`` and the Run has tasks)
6. per-turn context blocks (from context providers; shown for that turn only)

Blocks 1-4 depend only on the Spec and form a stable prefix; 5 and 6 depend on Run state
and are appended after it. Empty blocks are left out; blocks are separated by a blank line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from psych_runtime.specs._models import AgentSpec

if TYPE_CHECKING:
    from psych_runtime.specs._display import Task

ANSWER_STYLES: dict[str, str] = {
    "concise": (
        "Answer style: be concise. Lead with the answer, use as few words as the answer "
        "needs, and skip preamble and restating the question."
    ),
}


@dataclass(frozen=True)
class TaskItem:
    """One entry of the Run's task list as the prompt shows it."""

    title: str
    status: Literal["pending", "in_progress", "completed"]


def _skills_index(spec: AgentSpec) -> str:
    if not spec.skills:
        return ""
    lines = ["Skills: call load_skill with a name to read its full instructions before using it."]
    lines += [f"- {skill.name}: {skill.description}" for skill in spec.skills]
    return "\n".join(lines)


def _subagents_index(spec: AgentSpec) -> str:
    if not spec.subagents:
        return ""
    lines = ["Subagents: call delegate with an agent name below and a self-contained task."]
    lines += [f"- {sub.name}: {sub.description}" for sub in spec.subagents]
    return "\n".join(lines)


def _task_block(tasks: Sequence[TaskItem | Task]) -> str:
    if not tasks:
        return ""
    lines = ["Task list:"]
    lines += [f"- [{task.status}] {task.title}" for task in tasks]
    return "\n".join(lines)


def with_context(prompt: str, context: Sequence[str]) -> str:
    """``prompt`` followed by one call's per-turn context blocks (block 6).

    The one place the blocks are joined: ``system_prompt`` and the model activity (which
    holds the Run's prompt text, not its Spec) both use it. Each block is stripped, empty
    ones are left out, and a blank line separates them.
    """
    return "\n\n".join(block for block in (prompt, *(b.strip() for b in context)) if block)


def system_prompt(
    spec: AgentSpec,
    *,
    tasks: Sequence[TaskItem | Task] = (),
    context: Sequence[str] = (),
) -> str:
    """The system prompt for one turn of ``spec``, in the documented order.

    Args:
        spec: the agent.
        tasks: the Run's task list, if the agent has one (``Task``, what ``update_tasks``
            records, or ``TaskItem``, the older name of the same two fields).
        context: per-turn context blocks, already budgeted by their providers.
    """
    blocks = [
        spec.instructions.strip(),
        ANSWER_STYLES[spec.answer_style] if spec.answer_style else "",
        _skills_index(spec),
        _subagents_index(spec),
        _task_block(tasks) if spec.tasks_enabled else "",
    ]
    return with_context("\n\n".join(block for block in blocks if block), context)
