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
from datetime import UTC, datetime
from typing import Annotated, Any, Protocol, runtime_checkable

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from psych_runtime.specs._documents import (
    MAX_SPEC_DEPTH,
    check_tree,
    load_json,
    load_yaml,
    tree_problem,
)
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
        message = detail["msg"]
        if detail["type"] == "value_error":  # our own validators' words, without pydantic's tag
            message = message.removeprefix("Value error, ")
        lines.append(f"{path or '<root>'}: {message}")
    return "\n".join(lines)


def parse_spec(data: Any, *, source: str = "spec") -> AgentSpec | WorkflowSpec:
    """Validate a dict (from JSON, YAML or code) into a Spec, discriminated on ``kind``.

    The data is first checked to be a bounded tree (``check_tree``: no cycles, not too
    deep or large, no lone surrogates or giant integers), so validating it is bounded too.

    Raises:
        SpecError: naming every offending path.
    """
    if isinstance(data, AgentSpec | WorkflowSpec):
        return data
    check_tree(data, source=source)
    return _parse_tree(data, source)


def _parse_tree(data: Any, source: str) -> AgentSpec | WorkflowSpec:
    """``parse_spec`` of data already known to be a bounded tree."""
    if not isinstance(data, dict):
        raise SpecError(f"{source}: expected a mapping, got {type(data).__name__}")
    if "kind" not in data:
        raise SpecError(f"{source}: kind: required, one of 'agent' or 'workflow'")
    try:
        return _SPEC_ADAPTER.validate_python(data)
    except ValidationError as err:
        raise SpecError(f"{source} is invalid:\n{format_validation_error(err)}") from err


def spec_to_data(spec: AgentSpec | WorkflowSpec) -> dict[str, Any]:
    """The Spec as plain JSON-compatible data, every field present."""
    data: dict[str, Any] = spec.model_dump(mode="json")
    return data


def canonical_bytes(spec: AgentSpec | WorkflowSpec) -> bytes:
    """The bytes a Spec's hash is computed over.

    Raises:
        SpecError: a value cannot be represented canonically (NaN, infinity, a lone
            surrogate, a giant integer, nesting deeper than ``MAX_SPEC_DEPTH``), naming
            its path.
    """
    try:
        # The JSON dump would quietly turn NaN into null, and crash on the others.
        problem = tree_problem(spec.model_dump(), max_values=None)
        data = spec_to_data(spec)
    except ValueError as err:  # pydantic's own serialisation depth limit
        raise SpecError(f"the Spec cannot be serialised: {err}") from err
    if problem is not None:
        raise SpecError(str(problem))
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
        """A Version of ``spec`` with its hash computed, stamped now unless told otherwise.

        Raises:
            SpecError: ``published_at`` has no time zone (the stores keep times with their
                offset and refuse one without: it cannot be ordered among the others).
        """
        if published_at is not None and published_at.utcoffset() is None:
            raise SpecError(
                f"published_at {published_at.isoformat()!r} has no time zone: give one "
                "(datetime.now(UTC), or .replace(tzinfo=...))"
            )
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
        check_tree(data, source=source, max_depth=MAX_SPEC_DEPTH + 1)
        return cls._from_tree(data, source)

    @classmethod
    def _from_tree(cls, data: Any, source: str) -> Version:
        if not isinstance(data, dict):
            raise SpecError(f"{source}: expected a mapping, got {type(data).__name__}")
        missing = [k for k in ("hash", "spec", "published_at") if k not in data]
        if missing:
            raise SpecError(f"{source}: missing {', '.join(missing)}")
        spec = _parse_tree(data["spec"], f"{source}.spec")
        try:
            version = cls.model_validate({**data, "spec": spec})
        except ValidationError as err:
            raise SpecError(f"{source} is invalid:\n{format_validation_error(err)}") from err
        return version.verify()

    @classmethod
    def from_json(cls, text: str | bytes, *, source: str = "version") -> Version:
        """Read a JSON Version document (see ``from_data``)."""
        return cls._from_tree(_version_document(load_json, text, source), source)

    @classmethod
    def from_yaml(cls, text: str | bytes, *, source: str = "version") -> Version:
        """Read a YAML Version document (see ``from_data``)."""
        return cls._from_tree(_version_document(load_yaml, text, source), source)


def spec_to_json(spec: AgentSpec | WorkflowSpec) -> str:
    """The Spec as a JSON document, every field present."""
    return json.dumps(spec_to_data(spec), sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def spec_to_yaml(spec: AgentSpec | WorkflowSpec) -> str:
    """The Spec as a YAML document, every field present."""
    return _dump_yaml(spec_to_data(spec))


def _version_document(load: Any, text: str | bytes, source: str) -> Any:
    # A Version document is what publish wrote around a Spec already within the bounds;
    # its indentation may make it longer than a hand-written document, so only its
    # structure is bounded (one level deeper, for the envelope).
    return load(text, source=source, max_bytes=None, max_depth=MAX_SPEC_DEPTH + 1)


def spec_from_json(text: str | bytes, *, source: str = "spec") -> AgentSpec | WorkflowSpec:
    """Read a Spec from a JSON document (UTF-8 text or bytes).

    Raises:
        SpecError: the document is malformed, too large or too deep, or its fields are
            invalid; the message names ``source`` and the line and column or the path.
    """
    return _parse_tree(load_json(text, source=source), source)


def spec_from_yaml(text: str | bytes, *, source: str = "spec") -> AgentSpec | WorkflowSpec:
    """Read a Spec from a YAML document (UTF-8 text or bytes; safe tags only).

    Raises:
        SpecError: as ``spec_from_json``; also for a duplicate key or an alias that
            expands the document past ``MAX_VALUES``.
    """
    return _parse_tree(load_yaml(text, source=source), source)


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
