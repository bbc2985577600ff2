"""The JSON Schema of a Spec file, derived from the models, for editors and other tools.

Editors with the YAML language server complete and check a Spec file that names the schema
(``# yaml-language-server: $schema=...``); ``psych schema`` prints it, and the copy kept
beside this module (``psych-spec.schema.json``, shipped as package data) is checked by a
test to equal what the models produce, so the two cannot drift apart. Building it does no
I/O; writing or reading the file is the caller's.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, TypeAdapter

from psych_runtime.specs import _models
from psych_runtime.specs._field_docs import with_field_docs
from psych_runtime.specs._models import Spec

SCHEMA_FILE = "psych-spec.schema.json"
"""The schema's file name in this package (package data) and in the repository's specs/."""

_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def spec_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) a Spec file (YAML or JSON) must satisfy.

    It is what the models accept, plus one thing ``parse_spec`` asks of a file and the
    models leave to their default: a file states its ``kind`` (a nested Spec may omit it).
    Checks that need more than the Spec (registered tools, known models, reachable MCP
    servers) are ``psych validate``'s, not the schema's.
    """
    schema: dict[str, Any] = TypeAdapter(Spec).json_schema(mode="validation")
    with_field_docs(schema, _spec_models())
    return {
        "$schema": _DIALECT,
        "title": "psych-runtime Spec",
        "description": "An AgentSpec (kind: agent) or a WorkflowSpec (kind: workflow).",
        "type": "object",
        "required": ["kind"],
        **schema,
    }


def _spec_models() -> dict[str, type[BaseModel]]:
    return {
        name: value
        for name, value in vars(_models).items()
        if isinstance(value, type) and issubclass(value, BaseModel)
    }


def spec_json_schema_text() -> str:
    """``spec_json_schema`` as the text of the kept file: sorted keys, two-space indents."""
    return json.dumps(spec_json_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
