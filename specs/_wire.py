"""Wire forms: what a Run's history carries of a model, without what its reader fills in.

A field holding its default is left out of a payload and read back as that default, so
every default left out is history bytes a Run does not spend (the server's CPU per event
grows with its size, bench/README.md). The readers are the same pydantic models, so a
payload written in full (every history before this) reads the same.
"""

from __future__ import annotations

import functools
from typing import Any

from pydantic import BaseModel, TypeAdapter

from psych_runtime.specs._models import AgentSpec, Spec, WorkflowSpec
from psych_runtime.specs._version import Version


@functools.cache
def field_defaults(cls: type[BaseModel]) -> dict[str, Any]:
    """The default of each of ``cls``'s optional fields, read once per class.

    Pydantic's ``get_default`` inspects a default factory's signature on every call: once
    per field per payload written, that was a quarter of a turn's workflow-task time
    (py-spy, issue 27). Payload defaults are immutable values (or factories of them), so
    the value read once compares the same as a fresh one.
    """
    return {
        name: field.get_default(call_default_factory=True)
        for name, field in cls.model_fields.items()
        if not field.is_required()
    }


def drop_defaults(model: BaseModel, data: dict[str, Any]) -> dict[str, Any]:
    """``data``, the dump of ``model``, without the fields that hold their default (in
    place; returned)."""
    values = model.__dict__
    for key, default in field_defaults(type(model)).items():
        if key in data and ((value := values[key]) is default or value == default):
            del data[key]
    return data


_SPEC: TypeAdapter[AgentSpec | WorkflowSpec] = TypeAdapter(Spec)


def _keep_kinds(full: Any, small: Any) -> None:
    """Put back every ``kind`` of ``full`` that ``small`` left out (the discriminators of
    the Spec's unions: a step, a tool, the Spec itself; each has its one value as its
    default, and a union cannot be read without it)."""
    if isinstance(full, dict) and isinstance(small, dict):
        if "kind" in full:
            small.setdefault("kind", full["kind"])
        for key, value in small.items():
            _keep_kinds(full.get(key), value)
    elif isinstance(full, list) and isinstance(small, list):
        for one, other in zip(full, small, strict=False):
            _keep_kinds(one, other)


def spec_wire_data(spec: AgentSpec | WorkflowSpec) -> dict[str, Any]:
    """``spec`` as JSON data without the fields at their defaults (the discriminating
    ``kind`` fields kept): a tenth to a half of its full dump.

    Checked before it is used: if it does not read back as ``spec`` (a validator that
    derives a field only when it is absent, say), the full dump is returned instead.
    Either reads back as ``spec``, so its hash, which is over the full dump
    (``canonical_bytes``), is the same.
    """
    full: dict[str, Any] = spec.model_dump(mode="json")
    small: dict[str, Any] = spec.model_dump(mode="json", exclude_defaults=True)
    _keep_kinds(full, small)
    try:
        same = _SPEC.validate_python(small) == spec
    except ValueError:
        same = False
    return small if same else full


def version_wire_data(version: Version) -> dict[str, Any]:
    """``version`` as JSON data with its Spec in wire form (``spec_wire_data``)."""
    data: dict[str, Any] = version.model_dump(mode="json", exclude={"spec"})
    data["spec"] = spec_wire_data(version.spec)
    return data
