"""The task list: the ``update_tasks`` built-in and the Run's list.

``update_tasks`` replaces the whole list (items with a title and a status; the bounds are
``specs``'). Each accepted change is a ``TasksUpdated`` record and bumps the list's
revision; the first model call after a change sends the system prompt inline again (with
the new task-list block), the others by reference. Invalid input changes nothing and is
refused to the model with the reason (``error``). The list is this feature's only state,
plain data (``TaskList``) that a Run continuing as new carries as it is, and the
``tasks`` of ``RunState``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import ModelCallInput, ToolCallRequest, ToolDefinition
    from psych_runtime.specs import (
        MAX_TASK_TITLE,
        MAX_TASKS,
        TASKS_SCHEMA,
        AgentSpec,
        Task,
        parse_tasks,
        system_prompt,
    )
    from psych_runtime.workflows.contract._records import TasksUpdated
    from psych_runtime.workflows.features._display_tool import Parsed
    from psych_runtime.workflows.kernel._feature import Builtin, Feature, RunView


class TaskList(BaseModel):
    """A Run's task list and how many times it changed (0: never set)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tasks: tuple[Task, ...] = ()
    revision: int = 0


UPDATE_TASKS = ToolDefinition(
    name="update_tasks",
    description=(
        "Set your task list: the whole list, replacing the one before. Each task has a "
        "title and a status (pending, in_progress or completed). Keep it current as you "
        f"work; at most {MAX_TASKS} tasks of {MAX_TASK_TITLE} characters each."
    ),
    parameters=TASKS_SCHEMA,
)


class Tasks(Feature):
    """``update_tasks`` and the list it keeps."""

    name = "tasks"

    def __init__(self, run: RunView) -> None:
        super().__init__(run)
        self.tasks = TaskList()
        self._shown = 0
        """The revision the system prompt of this execution's model calls shows."""

    def builtins(self) -> tuple[Builtin, ...]:
        return (
            Parsed[tuple[Task, ...]](parse_tasks, self._set).builtin(
                self.run, UPDATE_TASKS, lambda spec: spec.tasks_enabled
            ),
        )

    def _set(self, turn: int, call: ToolCallRequest, tasks: tuple[Task, ...]) -> str:
        self.tasks = TaskList(tasks=tasks, revision=self.tasks.revision + 1)
        log = self.run.log
        log.add(TasksUpdated(**log.stamp(), turn=turn, call_id=call.id, tasks=tasks))
        done = sum(1 for task in tasks if task.status == "completed")
        return f"task list updated: {len(tasks)} tasks, {done} completed"

    def into_call(self, call: ModelCallInput) -> ModelCallInput:
        if self.tasks.revision != self._shown:
            # The list changed: this call sends the prompt with it inline (a new ref).
            self._shown = self.tasks.revision
            return call.model_copy(update={"system_prompt": self._prompt(), "system_ref": None})
        if call.system_ref is None and self._shown:
            return call.model_copy(update={"system_prompt": self._prompt()})
        return call

    def _prompt(self) -> str:
        spec = self.run.spec
        assert isinstance(spec, AgentSpec)
        return system_prompt(spec, tasks=self.tasks.tasks)

    def carry(self) -> Any:
        return self.tasks if self.tasks.revision else None

    def restore(self, carried: Any) -> None:
        self.tasks = TaskList.model_validate(carried)

    def run_state(self) -> dict[str, Any]:
        return {"tasks": self.tasks.tasks}
