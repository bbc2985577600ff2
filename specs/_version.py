"""Canonical bytes, content hashes, Versions, and JSON/YAML documents.

``canonical_bytes`` is JSON of the validated model with every field present (defaults
materialised, ``None`` as ``null``), keys sorted at every level, no insignificant
whitespace, UTF-8 (not ASCII-escaped), NaN refused. So an explicit default and an omitted
field hash the same, and adding a field to a model moves the hash of every Spec that
contains that model (that is deliberate: the hash is what the Run executes).
"""

from __future__ import annotations

import hashlib
import json
import math
from datetime import UTC, datetime
from typing import Annotated, Any, Protocol, runtime_checkable

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from psych_runtime.specs._errors import SpecError, VersionMismatch
from psych_runtime.specs._models import AgentSpec, Spec, WorkflowSpec

VersionHash = Annotated[str, Field(pattern=r"^sha256:[0-9a-f]{64}$")]
"""``"sha256:"`` followed by 64 lowercase hex digits."""


class _Dumper(yaml.SafeDumper):
    """PyYAML's safe dumper, but strings with a line-break character it would otherwise
    write raw (and read back as a space) are double-quoted, where they are escaped."""


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = '"' if any(c in data for c in "\x85\u2028\u2029") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _represent_str)


def _dump_yaml(data: Any) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=True, allow_unicode=True)


_TAGS = frozenset({"agent", "workflow", "tool", "code", "http"})
_SPEC_ADAPTER: TypeAdapter[AgentSpec | WorkflowSpec] = TypeAdapter(Spec)


def format_validation_error(err: ValidationError, prefix: str = "") -> str:
    """Render a pydantic error as one ``path: message`` line per problem."""
    lines = []
    for detail in err.errors(include_url=False):
        path = prefix
        for index, part in enumerate(detail["loc"]):
            # A discriminated union puts its tag in the location; a reader needs no tag.
            if (index == 0 and not prefix and part in ("agent", "workflow")) or (
                index > 0 and isinstance(detail["loc"][index - 1], int) and part in _TAGS
            ):
                continue
            if isinstance(part, int):
                path += f"[{part}]"
            else:
                path = f"{path}.{part}" if path else str(part)
        lines.append(f"{path or '<root>'}: {detail['msg']}")
    return "\n".join(lines)


def parse_spec(data: Any, *, source: str = "spec") -> AgentSpec | WorkflowSpec:
    """Validate a dict (from JSON, YAML or code) into a Spec, discriminated on ``kind``.

    Raises:
        SpecError: naming every offending path.
    """
    if isinstance(data, AgentSpec | WorkflowSpec):
        return data
    if not isinstance(data, dict):
        raise SpecError(f"{source}: expected a mapping, got {type(data).__name__}")
    if "kind" not in data:
        raise SpecError(f"{source}: kind: required, one of 'agent' or 'workflow'")
    try:
        return _SPEC_ADAPTER.validate_python(data)
    except ValidationError as err:
        raise SpecError(f"{source} is invalid:\n{format_validation_error(err)}") from err


def _no_nan(value: Any, path: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise SpecError(f"{path}: {value!r} cannot be hashed (NaN and infinities are refused)")
    if isinstance(value, dict):
        for key, item in value.items():
            _no_nan(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _no_nan(item, f"{path}[{index}]")


def spec_to_data(spec: AgentSpec | WorkflowSpec) -> dict[str, Any]:
    """The Spec as plain JSON-compatible data, every field present."""
    data: dict[str, Any] = spec.model_dump(mode="json")
    return data


def canonical_bytes(spec: AgentSpec | WorkflowSpec) -> bytes:
    """The bytes a Spec's hash is computed over.

    Raises:
        SpecError: a value cannot be represented canonically (NaN, infinity).
    """
    _no_nan(spec.model_dump(), "")  # the JSON dump would quietly turn NaN into null
    data = spec_to_data(spec)
    return json.dumps(
        data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def version_hash(spec: AgentSpec | WorkflowSpec) -> str:
    """``"sha256:"`` + hex digest of ``canonical_bytes(spec)``."""
    return "sha256:" + hashlib.sha256(canonical_bytes(spec)).hexdigest()


class Version(BaseModel):
    """An immutable publication of a Spec.

    ``published_at`` is outside the hashed body, so republishing an identical Spec finds
    the existing Version instead of making a new one.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    hash: VersionHash
    """The content hash; the identity of this Version."""
    spec: Spec
    """The Spec exactly as validated."""
    published_at: datetime
    """When this Version was first stored (UTC)."""

    @classmethod
    def of(cls, spec: AgentSpec | WorkflowSpec, published_at: datetime | None = None) -> Version:
        """A Version of ``spec`` with its hash computed, stamped now unless told otherwise."""
        return cls(
            hash=version_hash(spec),
            spec=spec,
            published_at=published_at or datetime.now(UTC),
        )

    def verify(self) -> Version:
        """Recompute the hash and return self.

        Raises:
            VersionMismatch: the stated hash is not the hash of ``spec``.
        """
        actual = version_hash(self.spec)
        if actual != self.hash:
            raise VersionMismatch(
                f"Version states hash {self.hash} but its spec hashes to {actual}"
            )
        return self

    def to_data(self) -> dict[str, Any]:
        """Plain data: ``{"hash", "published_at", "spec"}``."""
        return {
            "hash": self.hash,
            "published_at": self.published_at.isoformat(),
            "spec": spec_to_data(self.spec),
        }

    def to_json(self) -> str:
        """A JSON document that ``Version.from_json`` reads back exactly."""
        return json.dumps(self.to_data(), sort_keys=True, indent=2, ensure_ascii=False) + "\n"

    def to_yaml(self) -> str:
        """A YAML document that ``Version.from_yaml`` reads back exactly."""
        return _dump_yaml(self.to_data())

    @classmethod
    def from_data(cls, data: Any, *, source: str = "version") -> Version:
        """Read a Version document, recompute its hash and refuse a mismatch.

        Raises:
            SpecError: the document is malformed (naming the path).
            VersionMismatch: the stated hash does not match the content.
        """
        if not isinstance(data, dict):
            raise SpecError(f"{source}: expected a mapping, got {type(data).__name__}")
        missing = [k for k in ("hash", "spec", "published_at") if k not in data]
        if missing:
            raise SpecError(f"{source}: missing {', '.join(missing)}")
        spec = parse_spec(data["spec"], source=f"{source}.spec")
        try:
            version = cls.model_validate({**data, "spec": spec})
        except ValidationError as err:
            raise SpecError(f"{source} is invalid:\n{format_validation_error(err)}") from err
        return version.verify()

    @classmethod
    def from_json(cls, text: str | bytes, *, source: str = "version") -> Version:
        """Read a JSON Version document (see ``from_data``)."""
        return cls.from_data(load_json(text, source=source), source=source)

    @classmethod
    def from_yaml(cls, text: str | bytes, *, source: str = "version") -> Version:
        """Read a YAML Version document (see ``from_data``)."""
        return cls.from_data(load_yaml(text, source=source), source=source)


def load_json(text: str | bytes, *, source: str = "document") -> Any:
    """Parse JSON, mapping syntax errors to a SpecError with line and column."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise SpecError(
            f"{source}: invalid JSON at line {err.lineno}, column {err.colno}: {err.msg}"
        ) from err


def load_yaml(text: str | bytes, *, source: str = "document") -> Any:
    """Parse YAML (safe loader), mapping syntax errors to a SpecError with line and column."""
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SpecError(f"{source}: invalid YAML{where}: {err.problem}") from err
    except yaml.YAMLError as err:
        raise SpecError(f"{source}: invalid YAML: {err}") from err


def spec_to_json(spec: AgentSpec | WorkflowSpec) -> str:
    """The Spec as a JSON document, every field present."""
    return json.dumps(spec_to_data(spec), sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def spec_to_yaml(spec: AgentSpec | WorkflowSpec) -> str:
    """The Spec as a YAML document, every field present."""
    return _dump_yaml(spec_to_data(spec))


def spec_from_json(text: str | bytes, *, source: str = "spec") -> AgentSpec | WorkflowSpec:
    """Read a Spec from a JSON document."""
    return parse_spec(load_json(text, source=source), source=source)


def spec_from_yaml(text: str | bytes, *, source: str = "spec") -> AgentSpec | WorkflowSpec:
    """Read a Spec from a YAML document."""
    return parse_spec(load_yaml(text, source=source), source=source)


@runtime_checkable
class VersionStore(Protocol):
    """Port: where published Versions live. Publishing is idempotent per hash."""

    def publish(self, spec: AgentSpec | WorkflowSpec) -> Version:
        """Store ``spec`` as a Version, or return the existing Version with its hash."""
        ...

    def get(self, version_hash: str) -> Version:
        """The Version with this hash.

        Raises:
            NotFound: no such Version.
        """
        ...
