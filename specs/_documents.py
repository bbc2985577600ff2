"""Reading JSON and YAML documents into plain data, in bounded time and memory.

A Spec document comes from a user, and the parsers do not bound what they are given: a
100,000-deep ``[[[`` exhausts the recursion limit, a 529-byte YAML "billion laughs"
expands through aliases to hundreds of millions of values, an integer of 5,000 digits
overflows Python's int/str limit, a ``"\\ud800"`` escape yields a string UTF-8 cannot
encode, and a duplicate key silently keeps the last value. Every one of those is refused
here as a ``SpecError`` naming the document and the place (line and column, or the path
of the value), before the data reaches pydantic, and so is anything the parsers
themselves refuse. Nothing else escapes.

Bounds (also in docs/decisions/specs.md):

- ``MAX_DOCUMENT_BYTES``: the UTF-8 text of a Spec document.
- ``MAX_SPEC_DEPTH``: nesting of mappings and lists (the root mapping is level 1).
- ``MAX_VALUES``: values after YAML aliases are expanded; a Spec of more values cannot
  fit in ``MAX_SPEC_BYTES`` of canonical JSON, so counting stops there.
- ``MAX_INT_DIGITS``: digits of one integer.
"""

from __future__ import annotations

import json
import math
import re
import string
from typing import Any

import yaml
import yaml.reader
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.events import MappingStartEvent, SequenceStartEvent
from yaml.nodes import MappingNode, Node, ScalarNode
from yaml.scanner import ScannerError
from yaml.tokens import Token

from psych_runtime.specs._errors import SpecError
from psych_runtime.specs._problem import Problem

MAX_SPEC_BYTES = 1 << 20
"""Largest canonical JSON of a publishable Spec (1 MiB), well under Temporal's 2 MB
payload limit, which a Spec must pass through whole."""

MAX_DOCUMENT_BYTES = 2 << 20
"""Largest Spec document (2 MiB of UTF-8): room for comments and indentation around a
Spec at ``MAX_SPEC_BYTES``, and a bound on the time PyYAML's pure-Python parse takes
(about 5 s per MiB on a slow machine)."""

MAX_SPEC_DEPTH = 128
"""Deepest nesting of mappings and lists in a Spec's data, the root mapping being 1."""

MAX_VALUES = MAX_SPEC_BYTES
"""Most values (mappings, lists, scalars) a document may expand to: each takes at least a
byte of canonical JSON, so more cannot make a Spec within ``MAX_SPEC_BYTES``."""

MAX_INT_DIGITS = 1000
"""Most digits in one integer (Python refuses to convert more than 4300 by default)."""

_INT_BOUND = 10**MAX_INT_DIGITS
_SURROGATE = re.compile("[\ud800-\udfff]")
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_$@-]+")

# One pass over JSON text that finds what json.loads would crash on or silently accept,
# with the position: strings (consumed whole, so their brackets do not count; possessive
# and ending at the text's end when unterminated, so a scan is linear), an optional
# following colon (the string is a key), brackets, and over-long digit runs.
_JSON_TOKEN = re.compile(
    r'(?P<string>"[^"\\]*+(?:\\.[^"\\]*+)*+(?:"|\\?\Z))(?P<colon>[ \t\r\n]*:)?'
    r"|(?P<open>[\[{])|(?P<close>[\]}])"
    rf"|(?P<digits>(?<![0-9])[0-9]{{{MAX_INT_DIGITS + 1},}})",
    re.DOTALL,
)


def _line_column(text: str, offset: int) -> str:
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return f"line {line}, column {column}"


def _text(document: str | bytes, source: str, max_bytes: int | None) -> str:
    """The document as text: UTF-8 (a BOM is allowed), within ``max_bytes``."""
    if isinstance(document, bytes):
        size = len(document)
    else:
        # A character is at most 4 bytes; only measure when the bound could be near.
        size = len(document)
        if max_bytes is not None and size * 4 > max_bytes:
            size = len(document.encode("utf-8", "surrogatepass"))
    if max_bytes is not None and size > max_bytes:
        raise SpecError(
            f"{source}: {size} bytes is more than a Spec document may hold ({max_bytes} bytes)"
        )
    if isinstance(document, str):
        return document
    try:
        return document.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = document.count(b"\n", 0, err.start) + 1
        column = err.start - (document.rfind(b"\n", 0, err.start) + 1) + 1
        raise SpecError(
            f"{source}: not UTF-8 at line {line}, column {column} "
            f"(byte {document[err.start]:#04x}): save the file as UTF-8"
        ) from None


def _scan_json(text: str, source: str, max_depth: int) -> None:
    """Refuse nesting deeper than ``max_depth``, duplicate keys and over-long numbers."""
    stack: list[set[str] | None] = []  # per open container: its keys, or None for a list
    for token in _JSON_TOKEN.finditer(text):
        kind = token.lastgroup
        if kind == "open":
            if len(stack) >= max_depth:
                where = _line_column(text, token.start())
                raise SpecError(f"{source}: {where}: nested deeper than {max_depth} levels")
            stack.append(set() if token.group() == "{" else None)
        elif kind == "close":
            if stack:
                stack.pop()
        elif kind == "digits":
            where = _line_column(text, token.start())
            raise SpecError(
                f"{source}: {where}: a number of {len(token.group())} digits "
                f"(at most {MAX_INT_DIGITS})"
            )
        elif token.group("colon") and stack and stack[-1] is not None:
            key = token.group("string")
            if "\\" in key:  # escapes: compare what they mean ("a" and "\u0061" are one key)
                try:
                    key = json.loads(key)
                except ValueError:
                    continue  # a malformed key: json.loads reports it with its position
            else:
                key = key[1:-1]
            if key in stack[-1]:
                where = _line_column(text, token.start())
                raise SpecError(f"{source}: {where}: duplicate key {key!r}")
            stack[-1].add(key)


def load_json(
    document: str | bytes,
    *,
    source: str = "document",
    max_bytes: int | None = MAX_DOCUMENT_BYTES,
    max_depth: int = MAX_SPEC_DEPTH,
) -> Any:
    """Parse a JSON document into bounded plain data (see the module docstring).

    Raises:
        SpecError: naming ``source`` and the line and column, or the path of the value.
    """
    text = _text(document, source, max_bytes)
    _scan_json(text, source, max_depth)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise SpecError(
            f"{source}: invalid JSON at line {err.lineno}, column {err.colno}: {err.msg}"
        ) from err
    except (ValueError, RecursionError) as err:
        # The scan above refuses what is known to cause these; this maps anything else.
        raise SpecError(f"{source}: invalid JSON: {err}") from err
    check_tree(data, source=source, max_depth=max_depth)
    return data


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, bounded in depth, refusing duplicate keys and over-long
    numbers, and turning the exceptions its constructors leak into marked YAML errors."""

    def __init__(self, text: str, max_depth: int) -> None:
        super().__init__(text)
        self.max_depth = max_depth
        self.depth = 0

    def fetch_flow_collection_start(self, TokenClass: type[Token]) -> None:
        # The scanner looks up to 1024 characters ahead for a simple key, at a cost that
        # grows with the flow level, so a run of ``[`` is refused as it is scanned.
        if self.flow_level >= self.max_depth:
            raise ScannerError(
                None,
                None,
                f"nested deeper than {self.max_depth} levels",
                self.get_mark(),
            )
        super().fetch_flow_collection_start(TokenClass)

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        # Composition recurses once per level; refusing here keeps it far from the limit.
        opens = self.check_event(MappingStartEvent, SequenceStartEvent)
        if opens:
            self.depth += 1
            if self.depth > self.max_depth:
                event = self.peek_event()  # type: ignore[no-untyped-call]  # untyped in the stubs
                raise ComposerError(
                    None, None, f"nested deeper than {self.max_depth} levels", event.start_mark
                )
        try:
            return super().compose_node(parent, index)
        finally:
            if opens:
                self.depth -= 1

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        if (
            isinstance(node, ScalarNode)
            and node.tag in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
            and sum(c in string.hexdigits for c in node.value) > MAX_INT_DIGITS
        ):
            raise ConstructorError(
                None,
                None,
                f"a number of more than {MAX_INT_DIGITS} digits",
                node.start_mark,
            )
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except Exception as err:
            # PyYAML's constructors leak whatever odd input makes them hit: a ValueError
            # for a 13th month, an AttributeError for an explicit !!timestamp that does not
            # parse. Each is a value that cannot be read, at this node.
            raise ConstructorError(
                None, None, f"cannot read this value: {err}", node.start_mark
            ) from err

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # merged keys may be overridden; that is what merging is for
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:
                    continue  # unhashable: the base constructor refuses it with its mark
                if first is not None:
                    raise ConstructorError(
                        None,
                        None,
                        f"duplicate key {key!r} (first at line {first})",
                        key_node.start_mark,
                    )
                seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)


def load_yaml(
    document: str | bytes,
    *,
    source: str = "document",
    max_bytes: int | None = MAX_DOCUMENT_BYTES,
    max_depth: int = MAX_SPEC_DEPTH,
) -> Any:
    """Parse a YAML document (safe tags only) into bounded plain data.

    Raises:
        SpecError: naming ``source`` and the line and column, or the path of the value.
    """
    text = _text(document, source, max_bytes)
    loader: _Loader | None = None
    try:
        loader = _Loader(text, max_depth)  # its reader refuses unprintable characters
        data = loader.get_single_data()
    except yaml.reader.ReaderError as err:
        where = _line_column(text, err.position)
        char = err.character if isinstance(err.character, str) else chr(err.character)
        raise SpecError(
            f"{source}: invalid YAML at {where}: character U+{ord(char):04X} is not allowed"
        ) from err
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SpecError(f"{source}: invalid YAML{where}: {err.problem or err.context}") from err
    except yaml.YAMLError as err:
        raise SpecError(f"{source}: invalid YAML: {err}") from err
    finally:
        if loader is not None:
            loader.dispose()
    check_tree(data, source=source, max_depth=max_depth)
    return data


def _render(parts: list[str | int]) -> str:
    path = ""
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        elif _PLAIN_KEY.fullmatch(part):
            path = f"{path}.{part}" if path else part
        else:
            path += f"[{part!r}]"
    return path or "<root>"


def _leaf_problem(value: Any) -> str | None:
    if isinstance(value, str):
        found = _SURROGATE.search(value)
        if found:
            return (
                f"contains a lone surrogate U+{ord(found.group()):04X}, which UTF-8 cannot "
                "encode (write the character itself, or a \\U escape in YAML)"
            )
    elif isinstance(value, bool):
        return None
    elif isinstance(value, int):
        if abs(value) >= _INT_BOUND:
            return f"an integer of more than {MAX_INT_DIGITS} digits"
    elif isinstance(value, float) and not math.isfinite(value):
        return f"{value!r} cannot be hashed (NaN and infinities are refused)"
    return None


def tree_problem(
    data: Any, *, max_depth: int = MAX_SPEC_DEPTH, max_values: int | None = MAX_VALUES
) -> Problem | None:
    """The first thing that keeps ``data`` from being a bounded tree of JSON values.

    Refused: a mapping or list that contains itself, nesting deeper than ``max_depth``,
    more than ``max_values`` values counting a shared mapping or list once per place it
    appears (as a YAML alias does), a string or key with a lone surrogate, an integer of
    more than ``MAX_INT_DIGITS`` digits, a NaN or infinity. Shared parts are measured
    once, so a YAML alias bomb is refused in time proportional to its text, not to its
    expansion. Other leaf types are left to the models. ``max_values=None`` counts
    nothing (a built Spec's size is bounded by its canonical bytes instead).
    """
    measured: dict[int, tuple[int, int]] = {}  # id -> (values, height) of a finished container
    open_ids: set[int] = set()
    parts: list[str | int] = []
    total = 0

    def children(container: Any) -> Any:
        return iter(container.items()) if isinstance(container, dict) else enumerate(container)

    if not isinstance(data, dict | list | tuple):
        problem = _leaf_problem(data)
        return Problem("<root>", problem) if problem else None
    # Frames: [container, its children, values so far, tallest child].
    stack: list[list[Any]] = [[data, children(data), 1, 0]]
    open_ids.add(id(data))
    total = 1
    while stack:
        frame = stack[-1]
        step = next(frame[1], None)
        if step is None:
            stack.pop()
            open_ids.discard(id(frame[0]))
            values, height = frame[2], frame[3] + 1
            measured[id(frame[0])] = (values, height)
            if stack:
                parts.pop()
                stack[-1][2] += values
                stack[-1][3] = max(stack[-1][3], height)
            continue
        key, value = step
        if isinstance(key, str) and _SURROGATE.search(key):
            parts.append(key)
            return Problem(_render(parts), "a key " + str(_leaf_problem(key)))
        if not isinstance(value, dict | list | tuple):
            problem = _leaf_problem(value)
            if problem:
                parts.append(key)
                return Problem(_render(parts), problem)
            frame[2] += 1
            total += 1
        elif id(value) in open_ids:
            parts.append(key)
            return Problem(_render(parts), "contains itself (a recursive YAML alias?)")
        elif id(value) in measured:
            values, height = measured[id(value)]
            frame[2] += values
            frame[3] = max(frame[3], height)
            total += values
            if len(stack) + height > max_depth:
                parts.append(key)
                return Problem(_render(parts), f"nested deeper than {max_depth} levels")
        else:
            parts.append(key)
            if len(stack) + 1 > max_depth:
                return Problem(_render(parts), f"nested deeper than {max_depth} levels")
            total += 1
            stack.append([value, children(value), 1, 0])
            open_ids.add(id(value))
        if max_values is not None and total > max_values:
            return Problem(
                _render(parts),
                f"expands to more than {max_values} values (YAML aliases repeat what they "
                f"name); a Spec is at most {MAX_SPEC_BYTES} bytes of canonical JSON",
            )
    return None


def check_tree(data: Any, *, source: str, max_depth: int = MAX_SPEC_DEPTH) -> None:
    """Refuse what ``tree_problem`` finds, naming ``source`` and the path.

    Raises:
        SpecError: ``"<source>: <path>: <what>"``.
    """
    problem = tree_problem(data, max_depth=max_depth)
    if problem is not None:
        raise SpecError(f"{source}: {problem}")
