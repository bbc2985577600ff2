"""How ``psych run``, ``psych report`` and ``psych status`` show a Run's task list, its
display components and its per-turn context (``TasksUpdated``, ``ComponentShown``,
``ContextProvided``).

A terminal has no widgets, so each component kind is written as a few indented text
lines: the same on a TTY and in a pipe, and safe to print: by the time they are records,
the model's strings are capped, hold no control character but newline and tab (no escape
sequence reaches the terminal) and its links are http(s) (``specs._display``); a context
provider's failure detail has its control characters escaped (``activities._context``).
A bidirectional override they may hold is written as its escape where they are printed
(``format_record``, ``report_fields``, ``format_state``: ``specs.printable``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import assert_never

from psych_runtime.specs import (
    AnyComponent,
    Card,
    CardItem,
    Carousel,
    Chart,
    Detail,
    Metric,
    Task,
    Timeline,
)
from psych_runtime.workflows import (
    ComponentShown,
    ContextProvided,
    DisplayRecord,
    RunReport,
    RunState,
    TasksUpdated,
)

_MARKS = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}


def task_lines(tasks: Sequence[Task]) -> list[str]:
    """One line per task: its mark and title."""
    return [f"{_MARKS[task.status]} {task.title}" for task in tasks]


def tasks_summary(tasks: Sequence[Task]) -> str:
    """``2/5 done`` (or ``none``)."""
    if not tasks:
        return "none"
    done = sum(1 for task in tasks if task.status == "completed")
    return f"{done}/{len(tasks)} done"


def _card(item: CardItem) -> list[str]:
    lines = [item.title]
    lines += item.body.splitlines()
    if item.image:
        lines.append(f"image: {item.image}")
    if item.link:
        lines.append(f"link: {item.link}")
    return lines


def component_lines(component: AnyComponent) -> list[str]:
    """A component as text: a heading line naming its kind, then its content."""
    if isinstance(component, Card):
        return ["card: " + component.title, *_card(component)[1:]]
    if isinstance(component, Carousel):
        lines = [f"carousel: {component.title or ''} ({len(component.cards)} cards)".strip()]
        for number, item in enumerate(component.cards, 1):
            first, *rest = _card(item)
            lines += [f"{number}. {first}", *("   " + line for line in rest)]
        return lines
    if isinstance(component, Detail):
        lines = ["detail: " + component.title]
        lines += [f"{field.label}: {field.value}" for field in component.fields]
        return lines + ([f"link: {component.link}"] if component.link else [])
    if isinstance(component, Timeline):
        lines = ["timeline: " + (component.title or f"{len(component.events)} events")]
        for event in component.events:
            body = f" - {event.body}" if event.body else ""
            lines.append(f"{event.at}  {event.title}{body}")
        return lines
    if isinstance(component, Chart):
        lines = [f"chart ({component.chart}): {component.title}"]
        for series in component.series:
            pairs = ", ".join(
                f"{label} {value:g}"
                for label, value in zip(component.labels, series.values, strict=True)
            )
            lines.append(f"{series.name}: {pairs}")
        return lines
    assert isinstance(component, Metric)
    unit = f" {component.unit}" if component.unit else ""
    delta = f" ({component.delta})" if component.delta else ""
    link = [f"link: {component.link}"] if component.link else []
    return [f"metric: {component.label} = {component.value}{unit}{delta}", *link]


def context_line(record: ContextProvided) -> str:
    """What one model call's context providers gave, on one line."""
    shown = ", ".join(
        f"{block.provider} {block.tokens} tokens" + (" (cut)" if block.truncated else "")
        for block in record.shown
    )
    skipped = ", ".join(f"{s.provider} {s.reason.replace('_', ' ')}" for s in record.skipped)
    line = f"  context: {shown or 'nothing'} of {record.budget_tokens}"
    return line + (f"; skipped {skipped}" if skipped else "")


def live_tasks(record: DisplayRecord) -> str | None:
    """The live line's task summary after ``record`` (None: it does not change it)."""
    match record:
        case TasksUpdated():
            return tasks_summary(record.tasks)
        case ComponentShown() | ContextProvided():
            return None
        case _:
            assert_never(record)


def format_display_record(record: DisplayRecord) -> str:
    """The progress line(s) of a display record."""
    match record:
        case TasksUpdated():
            lines = [f"  tasks ({tasks_summary(record.tasks)}):"]
            return "\n".join([*lines, *("      " + line for line in task_lines(record.tasks))])
        case ComponentShown():
            first, *rest = component_lines(record.component)
            return "\n".join(["  shown " + first, *("      " + line for line in rest)])
        case ContextProvided():
            return context_line(record)
        case _:
            assert_never(record)


def display_style(record: DisplayRecord) -> str:
    """The line style of a display record."""
    match record:
        case TasksUpdated() | ComponentShown():
            return "blue"
        case ContextProvided():
            return "yellow" if record.skipped else "dim"
        case _:
            assert_never(record)


def state_rows(state: RunState) -> list[tuple[str, str]]:
    """The status rows for what the Run shows now (its task list)."""
    return [("tasks", "\n".join(task_lines(state.tasks)))] if state.tasks else []


def display_fields(report: RunReport) -> list[tuple[str, str]]:
    """The report rows for the task list, the components and the context (none when the
    Run had none of them)."""
    rows: list[tuple[str, str]] = []
    if report.tasks:
        rows.append(("tasks", f"{tasks_summary(report.tasks)}, {report.task_updates} update(s)"))
        rows += [("", line) for line in task_lines(report.tasks)]
    if report.components:
        rows.append(("components", str(len(report.components))))
        for shown in report.components:
            first, *rest = component_lines(shown.component)
            rows.append(("", f"turn {shown.turn}: {first}"))
            rows += [("", "    " + line) for line in rest]
    if report.context:
        blocks = sum(len(call.shown) for call in report.context)
        skipped = sum(len(call.skipped) for call in report.context)
        rows.append(
            ("context", f"{blocks} block(s) over {len(report.context)} call(s), {skipped} skipped")
        )
        for call in report.context:
            for s in call.skipped:
                rows.append(("", f"turn {call.turn}: {s.provider} {s.reason}: {s.detail}"))
    return rows
