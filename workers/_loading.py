"""Loading user objects and Spec files named on the command line or in settings."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from psych_runtime.specs import (
    MAX_DOCUMENT_BYTES,
    AgentSpec,
    SpecError,
    WorkflowSpec,
    spec_from_json,
    spec_from_yaml,
)


def load_object(reference: str) -> Any:
    """Import ``module:attribute`` or ``path/to/file.py:attribute``.

    Raises:
        SpecError: the reference is malformed or names nothing.
    """
    target, sep, attribute = reference.rpartition(":")
    if not sep or not target or not attribute:
        raise SpecError(f"{reference!r}: expected 'module:attribute' or 'file.py:attribute'")
    if target.endswith(".py"):
        path = Path(target).resolve()
        if not path.is_file():
            raise SpecError(f"{reference!r}: no such file {path}")
        name = f"_psych_user_{path.stem}_{abs(hash(str(path)))}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise SpecError(f"{reference!r}: cannot import {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    else:
        if "" not in sys.path and str(Path.cwd()) not in sys.path:
            sys.path.insert(0, str(Path.cwd()))
        try:
            module = importlib.import_module(target)
        except ImportError as err:
            raise SpecError(f"{reference!r}: cannot import {target!r}: {err}") from err
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise SpecError(f"{reference!r}: {target!r} has no attribute {attribute!r}") from None


def load_spec_file(path: str | Path) -> AgentSpec | WorkflowSpec:
    """Read a Spec from a ``.yaml``/``.yml``/``.json`` file.

    Raises:
        SpecError: unreadable file, not UTF-8, larger than ``MAX_DOCUMENT_BYTES``, bad
            syntax, duplicate keys, too deep (with line and column), or invalid fields
            (with their paths).
    """
    file = Path(path)
    try:
        with file.open("rb") as handle:
            # One byte past the bound is enough for the parser to refuse the file, without
            # reading all of a huge one first.
            document = handle.read(MAX_DOCUMENT_BYTES + 1)
    except OSError as err:
        raise SpecError(f"{file}: cannot read: {err.strerror}") from err
    if file.suffix.lower() == ".json":
        return spec_from_json(document, source=str(file))
    return spec_from_yaml(document, source=str(file))
