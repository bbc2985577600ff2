"""The Spec reference page, generated from the pydantic models of ``psych_runtime.specs``.

Every model reachable from ``AgentSpec`` and ``WorkflowSpec`` gets a table: each field's
name, type, default, bounds (from its ``Field`` constraints, an item's too) and its
attribute docstring, which is the reference text (CONVENTIONS.md: spec fields carry
attribute docstrings that double as the reference). Nothing here is written by hand.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from psych_runtime import specs
from psych_runtime.specs import (
    MAX_SPEC_BYTES,
    MAX_SPEC_DEPTH,
    UNSUPPORTED_FIELDS,
    UNSUPPORTED_VALUES,
    AgentSpec,
    WorkflowSpec,
    field_docs,
)

ROOTS: tuple[type[BaseModel], ...] = (AgentSpec, WorkflowSpec)


def models() -> list[type[BaseModel]]:
    """Every model a Spec document can contain, in the order a reader meets them."""
    found: list[type[BaseModel]] = []
    pending = list(ROOTS)
    while pending:
        model = pending.pop(0)
        if model in found:
            continue
        found.append(model)
        for field in model.model_fields.values():
            pending.extend(m for m in _nested_models(field.annotation) if m not in found)
    return found


def _resolved(annotation: Any) -> Any:
    """A forward reference (``WorkflowStepRef.spec``) as the public model it names."""
    if isinstance(annotation, typing.ForwardRef):
        return getattr(specs, annotation.__forward_arg__)
    return annotation


def _nested_models(annotation: Any) -> Iterator[type[BaseModel]]:
    annotation = _resolved(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        return
    for arg in get_args(annotation):
        yield from _nested_models(arg)


def _anchor(model: type[BaseModel]) -> str:
    return model.__name__.lower()


def _bounds(metadata: list[Any]) -> list[str]:
    out: list[str] = []
    for item in metadata:
        if isinstance(item, annotated_types.Gt):
            out.append(f"> {item.gt}")
        elif isinstance(item, annotated_types.Ge):
            out.append(f">= {item.ge}")
        elif isinstance(item, annotated_types.Lt):
            out.append(f"< {item.lt}")
        elif isinstance(item, annotated_types.Le):
            out.append(f"<= {item.le}")
        elif isinstance(item, annotated_types.MinLen):
            out.append(f"length >= {item.min_length}")
        elif isinstance(item, annotated_types.MaxLen):
            out.append(f"length <= {item.max_length}")
        elif getattr(item, "pattern", None) is not None:
            out.append(f"matches `{item.pattern}`")
    return out


def render_type(annotation: Any, bounds: list[str], where: str = "") -> str:
    """``annotation`` as a reader writes it in YAML terms; bounds of nested items are
    appended to ``bounds`` (prefixed with where they apply)."""
    annotation = _resolved(annotation)
    origin = get_origin(annotation)
    if origin is typing.Annotated:
        inner, *metadata = get_args(annotation)
        for found in _bounds(metadata):
            bounds.append(f"{where}{found}")
        for item in metadata:
            if isinstance(item, FieldInfo):
                bounds.extend(f"{where}{found}" for found in _bounds(item.metadata))
        return render_type(inner, bounds, where)
    if origin in (Union, types.UnionType):
        return " | ".join(render_type(arg, bounds, where) for arg in get_args(annotation))
    if origin is Literal:
        return " | ".join(f"`{value!r}`" for value in get_args(annotation))
    if origin is tuple:
        item = get_args(annotation)[0]
        return f"list of {render_type(item, bounds, 'each item: ')}"
    if origin is dict:
        key, value = get_args(annotation)
        return f"mapping of {render_type(key, [], '')} to {render_type(value, [], '')}"
    if annotation is type(None):
        return "null"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"[{annotation.__name__}](#{_anchor(annotation)})"
    if annotation is Any:
        return "any JSON"
    names = {str: "string", int: "integer", float: "number", bool: "boolean"}
    if annotation in names:
        return names[annotation]
    raise TypeError(f"spec reference: no rendering for the annotation {annotation!r}")


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    if field.default_factory is not None:
        made = field.default_factory()  # type: ignore[call-arg]  # pydantic's own factories
        if isinstance(made, BaseModel):
            return "all defaults"
        return f"`{made!r}`"
    value = field.default
    if value is PydanticUndefined:
        return "required"
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, tuple) and not value:
        return "`[]`"
    return f"`{value!r}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _description(model: type[BaseModel], name: str, field: FieldInfo) -> str:
    text = field.description or field_docs(model).get(name, "")
    if not text and name == "kind":
        text = "Which kind of entry this is (the discriminator)."
    if not text:
        raise ValueError(f"{model.__name__}.{name} has no docstring: the reference needs one")
    unsupported = UNSUPPORTED_FIELDS.get(f"{model.__name__}.{name}")
    if unsupported:
        text += f" **Not implemented yet, refused at publish:** {unsupported}."
    for value, why in UNSUPPORTED_VALUES.get(f"{model.__name__}.{name}", {}).items():
        text += f" **`{value}` is refused at publish:** {why}."
    return text


def field_rows(model: type[BaseModel]) -> Iterator[tuple[str, str, str, str, str]]:
    """(name, type, default, bounds, description) of each field of ``model``."""
    for name, field in model.model_fields.items():
        bounds = _bounds(field.metadata)
        type_text = render_type(field.annotation, bounds)
        yield (
            name,
            type_text,
            _default(field),
            "; ".join(bounds) or "",
            _description(model, name, field),
        )


def render() -> str:
    """The whole page, as Markdown."""
    lines = [
        "# Spec reference",
        "",
        "Generated from the pydantic models of `psych_runtime.specs` by `make reference`",
        "(`docs/_gen/spec_reference.py`; do not edit): every field, its type, default, bounds",
        "and its docstring. A Spec document is YAML or JSON; unknown keys are refused, and",
        "`psych validate` names every problem with its path.",
        "",
        f"A Spec is at most {MAX_SPEC_BYTES:,} bytes of canonical JSON (`MAX_SPEC_BYTES`) and",
        f"nests at most {MAX_SPEC_DEPTH} levels (`MAX_SPEC_DEPTH`). Set-like lists (tools,",
        "servers, skills, subagents, `allow`) are sorted at validation and refuse repeats;",
        "ordered ones (steps, fallbacks, redirect URIs) keep their order.",
        "",
    ]
    for model in models():
        lines += [f"## {model.__name__}", ""]
        doc = (model.__doc__ or "").strip()
        if doc:
            lines += [" ".join(doc.split()), ""]
        lines += ["| Field | Type | Default | Bounds | What it does |", "|---|---|---|---|---|"]
        for row in field_rows(model):
            name, type_text, default, bounds, description = row
            cells = [f"`{name}`", type_text, default, bounds, description]
            lines.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
        lines.append("")
    return "\n".join(lines)
