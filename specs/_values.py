"""Checks of the values a Spec model's fields hold: numbers that are not booleans, and
JSON-valued fields (tool input schemas, step arguments) that are plain JSON, owned."""

from __future__ import annotations

import copy
import math
import re
from typing import Any

from pydantic import BeforeValidator

from psych_runtime.specs._documents import MAX_SPEC_DEPTH


def _not_a_boolean(value: Any) -> Any:
    """Refuse ``true``/``false`` where a number is asked: pydantic reads them as 1 and 0.

    Text in exponent form with a whole value (YAML's ``1e3``) is handed on as that float,
    which an int field takes as JSON's ``1e3`` is taken: pydantic reads text as an integer
    only when it is digits. Other text is left to pydantic as it is."""
    if isinstance(value, bool):
        raise ValueError(f"a number is needed here, not the boolean {str(value).lower()}")
    if isinstance(value, str) and _EXPONENT.fullmatch(value):
        number = float(value)
        if math.isfinite(number) and number.is_integer():
            return number
    return value


_EXPONENT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][+-]?[0-9]+")
"""A decimal number written with an exponent, as YAML 1.1 (PyYAML) leaves it text."""

NUMBER = BeforeValidator(_not_a_boolean)
"""On every int and float field of a Spec model (after its ``Field``, which keeps the
bounds in the JSON schema): a number, or text that reads as one (YAML reads ``1e3`` as
text, for an int field too), but never a boolean."""


def _plain_json(value: Any) -> None:
    """Refuse what JSON cannot say exactly: a set's order depends on the hash seed, so a
    Spec holding one would hash differently in two processes. Also refuse a mapping or list
    that contains itself or nests past ``MAX_SPEC_DEPTH``, walking with an explicit stack
    so neither can exhaust the recursion limit. (NaN, lone surrogates and giant integers
    are refused when the Spec is hashed or validated, with the path.)"""
    pending: list[tuple[Any, str, int]] = [(value, "", 1)]
    open_ids: set[int] = set()
    while pending:
        item, path, depth = pending.pop()
        if item is _CLOSE:  # its children are done: it is no longer an ancestor
            open_ids.discard(depth)  # (a close marker carries the container's id here)
            continue
        if isinstance(item, dict | list | tuple):
            if id(item) in open_ids:
                raise ValueError(f"{path or 'value'}: contains itself")
            if depth > MAX_SPEC_DEPTH:
                raise ValueError(f"{path or 'value'}: nested deeper than {MAX_SPEC_DEPTH} levels")
            open_ids.add(id(item))
            pending.append((_CLOSE, path, id(item)))
            if isinstance(item, dict):
                for key, child in reversed(item.items()):
                    if not isinstance(key, str):
                        raise ValueError(f"{path or 'value'}: key {key!r} is not a string")
                    pending.append((child, f"{path}.{key}" if path else key, depth + 1))
            else:
                for index in range(len(item) - 1, -1, -1):
                    pending.append((item[index], f"{path}[{index}]", depth + 1))
        elif item is not None and not isinstance(item, str | int | float | bool):
            raise ValueError(
                f"{path or 'value'}: {type(item).__name__} is not JSON "
                "(use a list, a mapping, a string, a number, a boolean or null)"
            )


_CLOSE = object()
"""Marks, on ``_plain_json``'s stack, where a container's children end."""


def own_json(value: dict[str, Any]) -> dict[str, Any]:
    """``value`` checked, and deep-copied: pydantic copies a dict's top level only, and a
    caller changing a nested value it kept must not change a published Version's Spec."""
    _plain_json(value)
    return copy.deepcopy(value)
