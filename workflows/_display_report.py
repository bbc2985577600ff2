"""The report's view of the task list, the components shown and the per-turn context,
projected from their records (``TasksUpdated``, ``ComponentShown``, ``ContextProvided``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from psych_runtime.activities._context_result import ContextShown, ContextSkipped
from psych_runtime.specs import Component, Task
from psych_runtime.workflows._records import ComponentShown, ContextProvided, TasksUpdated


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ComponentReport(_Frozen):
    """One component the model showed."""

    turn: int
    call_id: str
    component: Component


class ContextReport(_Frozen):
    """What the context providers gave one model call (blocks by reference)."""

    turn: int
    shown: tuple[ContextShown, ...] = ()
    skipped: tuple[ContextSkipped, ...] = ()
    budget_tokens: int


@dataclass(frozen=True)
class Display:
    """The three projections, for ``build_report``."""

    tasks: tuple[Task, ...]
    task_updates: int
    components: tuple[ComponentReport, ...]
    context: tuple[ContextReport, ...]


def display_of(records: Sequence[Any]) -> Display:
    """The final task list, how often it changed, the components and the context calls."""
    tasks: tuple[Task, ...] = ()
    updates = 0
    components: list[ComponentReport] = []
    context: list[ContextReport] = []
    for record in records:
        if isinstance(record, TasksUpdated):
            tasks, updates = record.tasks, updates + 1
        elif isinstance(record, ComponentShown):
            components.append(
                ComponentReport(
                    turn=record.turn, call_id=record.call_id, component=record.component
                )
            )
        elif isinstance(record, ContextProvided):
            context.append(
                ContextReport(
                    turn=record.turn,
                    shown=record.shown,
                    skipped=record.skipped,
                    budget_tokens=record.budget_tokens,
                )
            )
    return Display(tasks, updates, tuple(components), tuple(context))
