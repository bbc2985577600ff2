"""What an agent may put on the screen: its task list and its display components.

Both are data the model writes through a built-in tool (``update_tasks``,
``show_component``), so both are validated here, as pure functions a workflow may call,
and both are bounded: every string is capped, every list is capped, and links must be
http(s), because what the model writes ends up in a report and on a terminal that a person
reads (a ``javascript:`` or ``file:`` link there is an attack, not a link, and so is an
escape sequence: no string may hold a C0 or C1 control character, except newline and tab
in the long text fields, ``body`` and ``value``).

The bounds are part of the contract (docs/guides/context.md):

- a task list holds at most ``MAX_TASKS`` (50) items, each a title of 1 to
  ``MAX_TASK_TITLE`` (200) characters and a status ``pending``, ``in_progress`` or
  ``completed``;
- a component's short strings (titles, labels, values) hold at most ``MAX_SHORT`` (200)
  characters, its text bodies ``MAX_TEXT`` (2000), its links ``MAX_LINK`` (2048); a list
  inside a component (carousel cards, detail fields, timeline events, chart labels and
  values) at most ``MAX_ITEMS`` (20) entries, a chart at most ``MAX_SERIES`` (5) series.

Invalid input is never fixed up: ``parse_tasks`` and ``parse_component`` return the reason,
which the built-in hands back to the model as the call's ``error`` result.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, get_args
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    model_validator,
)

MAX_TASKS = 50
MAX_TASK_TITLE = 200
MAX_SHORT = 200
MAX_TEXT = 2000
MAX_LINK = 2048
MAX_ITEMS = 20
MAX_SERIES = 5

TaskStatus = Literal["pending", "in_progress", "completed"]


class _Display(BaseModel):
    # A chart value of NaN or Infinity (json.loads accepts NaN, Infinity and 1e999) would be
    # recorded, then written as null, and the record would no longer decode.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


def _http_only(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"links must be http(s) URLs with a host, not {url[:80]!r}")
    return url


# C0 controls, DEL and C1 controls: ESC starts ANSI and OSC 8 sequences (colours, cursor
# moves, hidden hyperlinks) and C1 CSI/OSC do the same in one character, so a string
# holding any of them would act on the terminal psych run/report/status print it to.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_BUT_LAYOUT = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _refuse_control(pattern: re.Pattern[str], allowed: str) -> Any:
    def check(value: str) -> str:
        found = pattern.search(value)
        if found is not None:
            raise ValueError(
                f"control character U+{ord(found.group()):04X} at position {found.start()} "
                f"is not allowed ({allowed}): it would act on the terminal that prints it"
            )
        return value

    return AfterValidator(check)


_NO_CONTROL = _refuse_control(_CONTROL, "none is")
_LAYOUT_ONLY = _refuse_control(_CONTROL_BUT_LAYOUT, "only newline and tab are")

Short = Annotated[str, StringConstraints(min_length=1, max_length=MAX_SHORT), _NO_CONTROL]
Text = Annotated[str, StringConstraints(max_length=MAX_TEXT), _LAYOUT_ONLY]
Link = Annotated[
    str, StringConstraints(max_length=MAX_LINK), _NO_CONTROL, AfterValidator(_http_only)
]


class Task(_Display):
    """One entry of a Run's task list."""

    title: Annotated[str, StringConstraints(min_length=1, max_length=MAX_TASK_TITLE), _NO_CONTROL]
    status: TaskStatus = "pending"


class TaskListInput(_Display):
    """``update_tasks``'s arguments: the whole list, replacing the one before."""

    tasks: Annotated[tuple[Task, ...], Field(max_length=MAX_TASKS)]


class CardItem(_Display):
    """A card's content (a card of its own, or one of a carousel's)."""

    title: Short
    body: Text = ""
    image: Link | None = None
    link: Link | None = None


class Card(CardItem):
    """A titled block of text, with an optional image and link."""

    kind: Literal["card"] = "card"


class Carousel(_Display):
    """A row of cards to page through."""

    kind: Literal["carousel"] = "carousel"
    title: Short | None = None
    cards: Annotated[tuple[CardItem, ...], Field(min_length=1, max_length=MAX_ITEMS)]


class DetailField(_Display):
    label: Short
    value: Text


class Detail(_Display):
    """Labelled fields of one thing (an order, a customer)."""

    kind: Literal["detail"] = "detail"
    title: Short
    fields: Annotated[tuple[DetailField, ...], Field(min_length=1, max_length=MAX_ITEMS)]
    link: Link | None = None


class TimelineEvent(_Display):
    at: Short
    """When, as the model words it (a date, a time, "step 2")."""
    title: Short
    body: Text = ""


class Timeline(_Display):
    """Events in order."""

    kind: Literal["timeline"] = "timeline"
    title: Short | None = None
    events: Annotated[tuple[TimelineEvent, ...], Field(min_length=1, max_length=MAX_ITEMS)]


class Series(_Display):
    name: Short
    values: Annotated[tuple[float, ...], Field(min_length=1, max_length=MAX_ITEMS)]


class Chart(_Display):
    """Numbers over labels: each series has one value per label."""

    kind: Literal["chart"] = "chart"
    title: Short
    chart: Literal["bar", "line", "pie"] = "bar"
    labels: Annotated[tuple[Short, ...], Field(min_length=1, max_length=MAX_ITEMS)]
    series: Annotated[tuple[Series, ...], Field(min_length=1, max_length=MAX_SERIES)]

    @model_validator(mode="after")
    def _one_value_per_label(self) -> Chart:
        for series in self.series:
            if len(series.values) != len(self.labels):
                raise ValueError(
                    f"series {series.name!r} has {len(series.values)} values for "
                    f"{len(self.labels)} labels; give one value per label"
                )
        return self


class Metric(_Display):
    """One figure with its label (and how it moved)."""

    kind: Literal["metric"] = "metric"
    label: Short
    value: Short
    """As shown ("42", "97.5 %", "3.2 k")."""
    unit: Short | None = None
    delta: Short | None = None
    """The change, as shown ("+4 %")."""
    link: Link | None = None


AnyComponent = Card | Carousel | Detail | Timeline | Chart | Metric
Component = Annotated[AnyComponent, Field(discriminator="kind")]
"""A display payload, discriminated on ``kind``."""

COMPONENT_KINDS: tuple[str, ...] = tuple(
    get_args(kind.model_fields["kind"].annotation)[0] for kind in get_args(AnyComponent)
)
"""The ``kind`` of each component, in the union's order (read from it, so a kind added to
the union is offered and documented to the model without a second list to update)."""


class ComponentInput(_Display):
    """``show_component``'s arguments."""

    component: Component


def _reason(err: ValidationError) -> str:
    problems = []
    for error in err.errors(include_url=False, include_input=False):
        where = ".".join(str(part) for part in error["loc"]) or "arguments"
        problems.append(f"{where}: {error['msg']}")
    return "; ".join(problems)


_TASKS = TypeAdapter(TaskListInput)
_COMPONENT = TypeAdapter(ComponentInput)


def parse_tasks(arguments: dict[str, Any]) -> tuple[Task, ...] | str:
    """``update_tasks``'s arguments as the new task list, or why they are refused."""
    try:
        return _TASKS.validate_python(arguments).tasks
    except ValidationError as err:
        return f"task list refused: {_reason(err)}"


def parse_component(arguments: dict[str, Any]) -> AnyComponent | str:
    """``show_component``'s arguments as a component, or why they are refused."""
    try:
        return _COMPONENT.validate_python(arguments).component
    except ValidationError as err:
        return f"component refused: {_reason(err)}"


TASKS_SCHEMA: dict[str, Any] = TaskListInput.model_json_schema()
"""``update_tasks``'s parameters (JSON Schema)."""


def _kind_required(schema: dict[str, Any]) -> dict[str, Any]:
    # Each kind's ``kind`` has a default (so code can build ``Card(title=...)``), which
    # pydantic's schema reads as optional; the discriminated union refuses a component
    # without it, so the schema the model is given says it is required.
    for definition in schema["$defs"].values():
        kind = definition.get("properties", {}).get("kind")
        if kind is not None:
            kind.pop("default", None)
            definition["required"] = ["kind", *definition.get("required", [])]
    return schema


COMPONENT_SCHEMA: dict[str, Any] = _kind_required(ComponentInput.model_json_schema())
"""``show_component``'s parameters (JSON Schema, one ``$defs`` entry per kind, each
requiring ``kind`` as ``parse_component`` does)."""
