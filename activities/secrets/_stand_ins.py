"""What the details walk (``_details``) reads in place of a value that is no text and no
plain container: the kind of each class, found once per class, and a value's stand-in.

Each kind's stand-in is what the payload converters send for such a value (pydantic's,
the worker's; else the SDK's default JSON one, whose encoder sends any iterable it does not
know as a list), so a value whose stand-in holds a secret can be replaced by the stand-in
redacted and still be encoded as it would have been, less the secret. Also the empty copy
of a container the walk rebuilds (``shell_of``) and how a dict's is filled (``refill``).
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import re
import sys
from array import array
from collections import OrderedDict, UserString
from collections.abc import Iterable, Iterator
from pathlib import PurePath
from typing import Any, Literal, cast

Kind = Literal[
    "model", "dataclass", "blob", "text", "enum", "pattern", "dicted", "items", "iterator"
]
"""How the walk reads a value (``kind_of``); a class of none of these is left as it is."""

KEYED_AS_TEXT = frozenset({"model", "text"})
"""Kinds pydantic's converter writes as ``str(value)`` when a dict key (the others: as
their stand-in)."""


def kind_of(cls: type) -> Kind | None:
    """How the walk reads a value of class ``cls`` (neither ``str``, ``bytes`` nor a
    container it walks itself), None when it leaves it as it is."""
    if hasattr(cls, "__pydantic_serializer__"):
        return "model"  # a pydantic model or dataclass, an ``AnyUrl``: its class's serializer
    if dataclasses.is_dataclass(cls):
        return "dataclass"
    if issubclass(cls, bytearray | memoryview | array):
        return "blob"  # read by the walk itself, as bytes (an array of bytes or characters)
    if issubclass(cls, enum.Enum):
        return "enum"
    core = sys.modules.get("pydantic_core")  # not loaded: none of its URLs exists
    if core is not None and issubclass(cls, core.Url | core.MultiHostUrl):
        return "text"
    if issubclass(cls, PurePath | UserString):
        return "text"  # a UserString: iterated, each character would be one again
    if issubclass(cls, re.Pattern):
        return "pattern"
    if callable(getattr(cls, "dict", None)):
        return "dicted"  # the default JSON converter sends what its dict() makes instead
    if issubclass(cls, Iterator):
        return "iterator"
    if issubclass(cls, Iterable):
        return "items"
    return None


_OWN_DICT: frozenset[Kind | None] = frozenset({None, "items", "iterator"})
"""Kinds whose values the default JSON encoder reads through a ``dict`` of their own when
they have one (it looks for ``dict`` before it reads an iterable's items)."""


def own_kind(kind: Kind | None, value: Any) -> Kind | None:
    """``value``'s kind: ``kind`` (its class's, ``kind_of``), or ``"dicted"`` when its class
    has none of the kinds the encoder reads first but ``value`` itself has a callable
    ``dict`` (set on the instance, or made by its ``__getattr__``), which the default JSON
    encoder calls as it calls a class's. One whose ``dict`` raises as it is looked up is
    ``"dicted"`` too: the encoder raises there, and ``stand_in`` finds it unencodable."""
    if kind not in _OWN_DICT:
        return kind
    try:
        found = getattr(value, "dict", None)
    except Exception:  # the encoder's lookup raises it too: unencodable (stand_in)
        return "dicted"
    return "dicted" if callable(found) else kind


def stand_in(kind: Kind, value: Any) -> tuple[Any, bool]:
    """What the walk reads in ``value``'s place (for a kind other than ``dataclass`` and
    ``blob``), and
    whether ``value`` must be replaced by it even when it holds no secret: it cannot be
    encoded (its stand-in then the ``[UNENCODABLE:<class>]`` text) or it was used up
    (an iterator, read here)."""
    try:
        if kind == "model":  # its class's serializer, as pydantic's converter (not
            # model_dump, which a class may override; a dataclass's fields alone miss
            # what it computes)
            serializer = type(value).__pydantic_serializer__
            return serializer.to_python(value, mode="json", by_alias=True), False
        if kind == "text":
            return str(value), False
        if kind == "enum":
            return value.value, False
        if kind == "pattern":
            return str(value.pattern), False  # a bytes pattern as pydantic writes it
        if kind == "dicted":
            return value.dict(), False
        return list(value), kind == "iterator"
    except Exception:  # neither converter can encode it (the _details module doc)
        return unencodable(value), True


def blob_read(value: bytearray | memoryview | array[Any]) -> str | bytes | None:
    """What the walk reads of a ``blob``: its bytes, an array of characters' text; None when
    it has none (an array of numbers, a released ``memoryview``: neither converter can
    send that)."""
    if isinstance(value, array):
        if value.typecode == "u":
            return value.tounicode()
        return value.tobytes() if value.typecode in "bB" else None
    try:
        return bytes(value) if isinstance(value, bytearray) else value.tobytes()
    except ValueError:  # released
        return None


def blob_made(value: bytearray | memoryview | array[Any], clean: str | bytes) -> Any:
    """A blob of ``value``'s (base) class holding ``clean``, what ``blob_read`` read of it
    redacted."""
    if isinstance(value, array):
        made = array(value.typecode)
        if isinstance(clean, str):
            made.fromunicode(clean)
        else:
            made.frombytes(clean)
        return made
    blob = cast(bytes, clean)  # read of a bytearray or memoryview: bytes
    return bytearray(blob) if isinstance(value, bytearray) else memoryview(blob)


def unencodable(value: Any) -> str:
    """What stands for a value neither payload converter can encode (``_details``)."""
    return f"[UNENCODABLE:{type(value).__qualname__}]"


def shell_of(node: Any) -> Any:
    """An empty container of ``node``'s class (with its attributes) to fill with its
    redacted contents; a plain one when the class is ``dict``/``list`` or cannot be
    copied. A dataclass's copy (its fields set by the walk), or a dict when it cannot
    be copied."""
    if type(node) is dict or type(node) is list:
        return type(node)()
    plain: Any = [] if isinstance(node, list) else {}
    try:
        shell = copy.copy(node)
    except Exception:  # the class's own copying failed: a plain one (_DetailsWalk)
        return plain
    if not isinstance(shell, type(plain) if isinstance(node, dict | list) else type(node)):
        return plain  # a copy that is no dict (list, dataclass) at all
    if isinstance(shell, OrderedDict):
        # Its own clear: dict's leaves its order holding the keys, and iterating the copy
        # then raised KeyError naming a redacted key (until 12-07), a secret itself.
        OrderedDict.clear(shell)
    elif isinstance(shell, dict):
        dict.clear(shell)
    elif isinstance(shell, list):
        list.clear(shell)
    return shell


def refill(shell: dict[Any, Any], pairs: list[tuple[Any, Any]]) -> None:
    """``shell`` (``shell_of`` a dict) given ``pairs``, through ``dict``'s own methods, not
    its class's; an ``OrderedDict``'s through ``OrderedDict``'s, which keep its order."""
    if isinstance(shell, OrderedDict):
        for key, value in pairs:
            OrderedDict.__setitem__(shell, key, value)
    else:
        dict.update(shell, pairs)
