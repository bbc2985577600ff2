"""What each Spec field means, read from the docstring under it in the models' source.

The models do not ask pydantic for these (``use_attribute_docstrings``): pydantic would
parse the source of every class each time the package is imported, about a quarter of
``psych validate``'s start-up, for text only the JSON Schema, the generated reference and
editors read. Here the module's source is parsed once, when one of those asks.
"""

from __future__ import annotations

import ast
import functools
import inspect
import sys
from typing import Any

from pydantic import BaseModel


@functools.cache
def _module_docs(module_name: str) -> dict[str, dict[str, str]]:
    """Per class of the module, each annotated attribute's docstring (cleaned)."""
    tree = ast.parse(inspect.getsource(sys.modules[module_name]))
    found: dict[str, dict[str, str]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        docs: dict[str, str] = {}
        for field, after in zip(node.body, node.body[1:], strict=False):
            if (
                isinstance(field, ast.AnnAssign)
                and isinstance(field.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[field.target.id] = inspect.cleandoc(after.value.value)
        found[node.name] = docs
    return found


def field_docs(model: type[BaseModel]) -> dict[str, str]:
    """Each field of ``model`` with a docstring, its own or an inherited one's."""
    docs: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if issubclass(cls, BaseModel) and cls.__module__.startswith("psych_runtime."):
            docs.update(_module_docs(cls.__module__).get(cls.__name__, {}))
    return {name: docs[name] for name in model.model_fields if name in docs}


def with_field_docs(schema: dict[str, Any], models: dict[str, type[BaseModel]]) -> None:
    """Give every property of ``schema``'s definitions (``$defs``, named like ``models``'
    keys) that has none the description its field's docstring holds; in place."""
    for name, definition in schema.get("$defs", {}).items():
        model = models.get(name)
        if model is None:
            continue
        properties = definition.get("properties", {})
        for field, doc in field_docs(model).items():
            prop = properties.get(field)
            if prop is not None:
                prop.setdefault("description", doc)
