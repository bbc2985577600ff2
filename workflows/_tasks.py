"""The task list: the ``update_tasks`` built-in and the Run's list (``RunBase._tasks``).

``update_tasks`` replaces the whole list (items with a title and a status; the bounds are
``specs._display``'s). Each accepted change is a ``TasksUpdated`` record and bumps the
list's revision; the turn loop sends the system prompt inline again (with the new
task-list block) on the first model call after a change, and by reference otherwise.
Invalid input changes nothing and is refused to the model with the reason (``error``).

The list is the Run's only task state and is plain data (``TaskList``), so a Run that
continues as new carries it as it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import ToolCallRequest, ToolDefinition
    from psych_runtime.specs import (
        MAX_TASK_TITLE,
        MAX_TASKS,
        TASKS_SCHEMA,
        AgentSpec,
        Task,
        parse_tasks,
        system_prompt,
    )
    from psych_runtime.workflows._carry import TaskList
    from psych_runtime.workflows._display_tool import ParsedCall, offer_when
    from psych_runtime.workflows._records import TasksUpdated

if TYPE_CHECKING:
    from psych_runtime.workflows._tool_calls import ToolCalls


UPDATE_TASKS = ToolDefinition(
    name="update_tasks",
    description=(
        "Set your task list: the whole list, replacing the one before. Each task has a "
        "title and a status (pending, in_progress or completed). Keep it current as you "
        f"work; at most {MAX_TASKS} tasks of {MAX_TASK_TITLE} characters each."
    ),
    parameters=TASKS_SCHEMA,
)


offer_tasks = offer_when(lambda spec: spec.tasks_enabled, UPDATE_TASKS)
"""``update_tasks`` when the agent has ``tasks_enabled``."""


def _set_tasks(run: ToolCalls, turn: int, call: ToolCallRequest, tasks: tuple[Task, ...]) -> str:
    run._tasks = TaskList(tasks=tasks, revision=run._tasks.revision + 1)
    run._log.add(TasksUpdated(**run._log.stamp(), turn=turn, call_id=call.id, tasks=tasks))
    done = sum(1 for task in tasks if task.status == "completed")
    return f"task list updated: {len(tasks)} tasks, {done} completed"


update_tasks = ParsedCall[tuple[Task, ...]](parse_tasks, _set_tasks)
"""Replace the Run's task list, or refuse the input with the reason."""


def prompt_with_tasks(spec: AgentSpec, tasks: TaskList) -> str:
    """The system prompt showing ``tasks`` in its task-list block."""
    return system_prompt(spec, tasks=tasks.tasks)
