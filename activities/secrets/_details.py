"""The walk of a failure's details for ``Redactor.scrub``: every secret out, nested, bounded.

What a kind of value comes back as, when something in it held a secret (otherwise it is the
very object), is chosen so the failure converter can still encode it and encodes it as it
would have, less the secret. The worker's payload converter is pydantic's
(``pydantic_core.to_json``); the SDK's default JSON one is checked against too:

- ``str`` and ``bytes``: redacted (``bytes`` as UTF-8, see ``_DetailsWalk._leaf``).
- ``dict``, ``list``, ``tuple``: rebuilt of redacted items, keys too (``_DetailsWalk``).
- ``collections.deque`` (both converters send it as a list): a ``deque`` of the redacted
  items, its ``maxlen`` kept, a subclass becoming its base.
- ``set``, ``frozenset``: a ``set`` (``frozenset``) of the redacted items, a subclass
  becoming its base; when an item can no longer be hashed once redacted (a pydantic model
  become its dump), a ``list`` of them: both converters send a set as a list anyway.
- A dataclass instance (a pydantic one: below): a shallow copy of its class, fields redacted (both
  converters send its fields, as a dict, and nothing else of it); set through
  ``object.__setattr__``, so a frozen one too, and ``__post_init__`` does not run again.
  One ``copy.copy`` fails for becomes a dict of its fields.
- A pydantic (v2) model, or a pydantic dataclass instance (its class's serializer, not
  its fields alone, is what pydantic's converter sends): its dumped form, what
  ``model_dump(mode="json", by_alias=True)`` makes unless the class overrides it (its
  class's ``__pydantic_serializer__``, which pydantic's converter uses too),
  redacted: exactly what pydantic's converter sends for it (a field serializer, a computed
  field, an alias, a ``SecretStr`` applied), where a model rebuilt with redacted fields
  would run its own serializers again on whatever they read besides the fields. As a dict
  key, which pydantic's converter writes as ``str(model)``, its text, redacted.
- Also through its class's serializer, so its dumped form, redacted: anything else whose
  class has a ``__pydantic_serializer__`` (pydantic's ``AnyUrl``, ``HttpUrl``, DSNs: their
  text, a password or a token in it redacted). ``pydantic_core``'s ``Url`` and
  ``MultiHostUrl``, a ``pathlib`` path and a ``collections.UserString``: their text
  (``str``), redacted (pydantic's converter sends the first three so; neither converter
  can send a ``UserString``). As a dict key, each is its text, redacted, as a model.
- A ``bytearray``, a ``memoryview``, an ``array.array`` of bytes (``b``, ``B``) or of
  characters (``u``): one of its class holding the redacted bytes (characters), a
  subclass becoming its base; a ``memoryview`` of bytes (format ``B``, one dimension).
  Pydantic's converter sends a ``bytearray`` as its text; the default JSON one sends each
  as the list of its items (bytes or characters). An array of numbers is left as it is.
- An ``enum.Enum`` member that is no ``str``, ``int`` or ``float`` (those are read as
  such): its value, walked as any value, so a value holding a secret becomes the value
  redacted (pydantic's converter sends its value; the default JSON one cannot send it).
  As a dict key, its value, redacted (what pydantic's converter writes). A compiled
  ``re`` pattern: its ``pattern`` (as text), likewise, as pydantic's converter sends it.
- A dict's ``keys()``, ``values()`` or ``items()``, a generator, and any other iterable
  none of the above is (a ``range``, a ``UserList``, a ``MappingProxyType``, a class of the
  activity's with ``__iter__``): the ``list`` of its items, redacted, which is what the
  default JSON converter sends for it (``AdvancedJSONEncoder.default`` turns any iterable
  it does not encode itself into a list; a mapping other than a ``dict`` so becomes its
  keys) and what pydantic's converter sends for an iterator (it cannot send the others).
  Read once (``list``): an iterator is used up, so it becomes that list whether or not a
  secret was in it; an iterable whose reading raises becomes ``[UNENCODABLE:<class>]``.
- Any other object with a callable ``dict`` attribute (pydantic v1's models, classes made
  like them; an iterable one too; one given its ``dict`` on the instance, not its class,
  as the encoder finds it too): what its ``dict()`` makes, walked as any value (a
  ``dict()`` making another such object read on, ``MAX_DETAIL_DEPTH`` times at most), which
  is what the default JSON converter sends for it (pydantic's cannot send it). One whose
  ``dict()`` raises (the encoder's error would be the failure's message) or makes such
  objects without end: ``[UNENCODABLE:<class>]``.
- A dataclass whose fields cannot be read or a model that cannot be dumped (neither
  converter could encode it): ``[UNENCODABLE:<class>]``.
- A key that cannot be hashed once redacted: its text (``str``), redacted.
- Anything else is left as it is: a ``datetime``, ``Decimal``, ``UUID``, IP address or
  complex number (their text is digits and fixed symbols), pydantic's ``SecretStr`` (sent
  masked), or what neither converter can send.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from itertools import chain
from typing import Any, cast

from psych_runtime.activities.secrets._stand_ins import (
    KEYED_AS_TEXT,
    Kind,
    blob_made,
    blob_read,
    kind_of,
    own_kind,
    refill,
    shell_of,
    stand_in,
    unencodable,
)

MAX_DETAIL_DEPTH = 100
"""How deep a failure's details may nest (a detail itself is at depth 1): deeper, a
container becomes ``_TOO_DEEP``. Well within what the payload converter's JSON encoder
(recursion-limited, ~1,000 frames less the worker's own) and a decoding workflow can take:
a failure whose details it cannot encode goes out as "Failed building exception result",
retryable and without its type."""

_TOO_DEEP = f"[TRUNCATED:deeper than {MAX_DETAIL_DEPTH}]"
"""What a rebuilt container holds instead of a container nested deeper than
``MAX_DETAIL_DEPTH``."""

_CYCLE = "[TRUNCATED:cycle]"
"""What a rebuilt container holds instead of a reference back to a tuple or set still
being rebuilt (``_DetailsWalk``)."""

_UNSEEN: Any = object()
"""A text the walk has not scanned yet."""

_SCALARS = frozenset({int, float, bool, type(None)})
"""What a walk skips at once (no text in it)."""
_TEXTS = (str, bytes)
_CONTAINERS = (dict, list, tuple, set, frozenset, deque)
_PLAIN = frozenset({*_TEXTS, *_CONTAINERS})
"""Types read as they are (no model, no dataclass): skipped by ``_stand_in`` at once."""
_CHASED = frozenset({"enum", "dicted"})
"""Kinds whose stand-in (an Enum's value, what a ``dict()`` makes) is read as any value."""
_BUILT_LAST = (tuple, set, frozenset, deque)
"""Containers built once their items are (the others get an empty copy first)."""


class _DetailsWalk:
    """One walk of a failure's details for ``Redactor._walked`` (the module says what each
    kind of value comes back as).

    Without recursion (an explicit stack), so it never raises ``RecursionError``; and a
    container nested deeper than ``MAX_DETAIL_DEPTH`` is replaced by ``_TOO_DEEP`` whether
    or not it held a secret, so what the walk returns is something the payload converter
    can encode (until 12-07 details ~1,000 deep raised ``RecursionError`` out of ``scrub``).

    Three passes. The first visits each container once (by identity, so a cycle or a shared
    container costs one visit), past the bound too once one is met twice, and finds the ones
    that hold a text a secret is in; a text met again (a key in each of 100k dicts) is
    looked up, not scanned again. The second, when a container was met more than once (in a
    tree, the first pass met each at its only depth), takes each container's depth as the
    longest chain of containers leading to it (a reference back up a cycle aside, and none
    through a container cut: what is under a cut is not met through it): one shared by
    several parents is one object wherever it is met, so one met deeper than the bound
    anywhere is replaced everywhere, and none kept is deeper than the bound wherever it is
    met (until 12-07 one was walked at the depth it was met first only, and what was under
    it could nest past the bound where it was met again deeper). The third rebuilds the
    containers holding, at any depth, a secret or one too deep: the rest, and every text
    without a secret, stay the very objects. A cycle is no depth: details with one cannot be
    encoded (JSON has none) whatever the walk does, and their secrets are redacted all the
    same.

    ``bytes`` are read as UTF-8; bytes that are not valid UTF-8 are kept as they are around
    what is replaced (``surrogateescape``), so a secret in a binary body is redacted too and
    the rest comes back byte for byte. A ``str`` or ``bytes`` subclass is read through its
    base class (its own ``__hash__``, ``__eq__`` or ``decode`` may fail or hide a secret).

    A rebuilt ``dict`` or ``list`` subclass (``OrderedDict``, ``defaultdict``, a class of
    the activity's) keeps its class and its attributes: a shallow ``copy.copy``, its
    contents then replaced through ``dict``'s or ``list``'s own methods, not the subclass's
    (the attributes are not walked). One ``copy.copy`` fails for comes back a plain
    ``dict`` or ``list``; an ``OrderedDict``'s through ``OrderedDict``'s (dict's own left
    its order holding the old keys: encoding it raised ``KeyError`` naming a redacted key,
    until 12-07), in its own order (``move_to_end``'s, which pydantic's converter sends).
    A named tuple stays one (one that cannot be built from its items becomes a plain
    tuple, as does any other tuple subclass). A cycle through a rebuilt
    dict, list or dataclass is rebuilt too (the copy refers to the copy); a reference back
    to a tuple or set still being rebuilt (met only through a cycle) cannot be filled in
    afterwards and becomes ``_CYCLE``.
    """

    def __init__(self, redact: Callable[[str], str]) -> None:
        self._redact = redact
        self._texts: dict[str, str | None] = {}
        self._blobs: dict[bytes, bytes | None] = {}
        self._too_deep: set[int] = set()
        # A value's id -> what stands for it (_stand_ins; an unreadable dataclass's
        # [UNENCODABLE:<class>] text), its text redacted (None when it held no secret, or
        # as a key it is its stand-in), whether it is replaced by its stand-in even
        # without a secret, whether as a key it is its stand-in.
        self._views: dict[int, tuple[Any, str | None, bool, bool]] = {}
        self._fields: dict[int, tuple[tuple[str, Any], ...]] = {}  # a dataclass's fields
        self._made: list[Any] = []  # what a dict() made and the walk read on from
        self._kinds: dict[type, Kind | None] = {}
        self._opaque: set[type] = set()  # classes of no kind (datetime, UUID): left as is

    def __call__(self, root: tuple[Any, ...]) -> tuple[Any, ...]:
        """``root`` redacted; ``root`` itself when nothing in it held a secret or nested
        too deep."""
        parents, holding, shared = self._explore(root)
        if shared:  # in a tree, each container is where the first pass met it: in bound
            self._bound(root, parents)
            for key in self._too_deep:  # each place it is met holds _TOO_DEEP instead
                up = parents.get(key, [])
                holding.extend(up if type(up) is list else (up,))
        dirty = set(holding)
        while holding:
            up = parents[holding.pop()]
            for parent in up if type(up) is list else (up,):
                if parent not in dirty:
                    dirty.add(parent)
                    holding.append(parent)
        return root if id(root) not in dirty else self._rebuild(root, dirty)

    def _leaf(self, value: str | bytes) -> str | bytes:
        """A text redacted (the very object when it held no secret; ``bytes`` as UTF-8 with
        ``surrogateescape``), each distinct text scanned once."""
        # A subclass is read through its base class (its contents, what the payload
        # converter encodes): its own __hash__ may be None (it defines __eq__), and its
        # own __eq__, __contains__ or decode may hide a secret.
        if isinstance(value, str):
            plain = value if type(value) is str else str.__str__(value)
            text = self._texts.get(plain, _UNSEEN)
            if text is _UNSEEN:
                clean = self._redact(plain)
                text = self._texts[plain] = None if clean == plain else clean
            return value if text is None else text
        raw = value if type(value) is bytes else bytes.__bytes__(value)
        blob = self._blobs.get(raw, _UNSEEN)
        if blob is _UNSEEN:
            decoded = raw.decode("utf-8", "surrogateescape")
            clean = self._redact(decoded)
            blob = None if clean == decoded else clean.encode("utf-8", "surrogateescape")
            self._blobs[raw] = blob
        return value if blob is None else blob

    def _stand_in(self, value: Any, chased: int = 0) -> Any:
        """What the walk reads in ``value``'s place (``_stand_ins``: a model's dump, an
        Enum's value, what a ``dict()`` makes, a URL's text, an iterable's items), or the
        ``[UNENCODABLE:<class>]`` text; else ``value`` itself (a dataclass's fields read
        here, once). Each value's stand-in is made once, each class's kind found once;
        ``chased``: how many values led to this one through ``_CHASED``."""
        if isinstance(value, _TEXTS):
            return value
        key = id(value)
        view = self._views.get(key)
        if view is not None:
            return view[0]
        if key in self._fields or isinstance(value, _CONTAINERS):
            return value
        cls = type(value)
        kind = self._kinds.get(cls, _UNSEEN)
        if kind is _UNSEEN:
            kind = self._kinds[cls] = None if isinstance(value, type) else kind_of(cls)
        if not isinstance(value, type):
            kind = own_kind(kind, value)  # a dict() of its own, as the encoder looks
        if kind is None:
            if not hasattr(value, "__dict__") and not hasattr(cls, "__getattr__"):
                self._opaque.add(cls)  # nor any value of its class: none has a dict()
            return value
        if kind == "dataclass":
            try:
                fields = tuple((f.name, getattr(value, f.name)) for f in dataclasses.fields(value))
            except Exception:  # an unset field: neither converter can encode it (module doc)
                self._views[key] = (unencodable(value), self._text(value), True, False)
                return self._views[key][0]
            self._fields[key] = fields
            return value
        if kind == "blob":  # no view when nothing in it changes: it would stand for itself
            raw = blob_read(value)
            clean = raw if raw is None else self._leaf(raw)
            if clean is raw or clean is None:
                return value
            self._views[key] = (blob_made(value, clean), None, True, True)
            return self._views[key][0]
        read, replace = stand_in(kind, value)
        if kind in _CHASED and not replace:
            if chased < MAX_DETAIL_DEPTH:  # read as any value (a dataclass, a model...)
                made = read
                self._made.append(made)  # its id stays its own while the walk lasts
                read = self._stand_in(made, chased + 1)
                view = self._views.get(id(made))
                replace = view is not None and view[2]  # unencodable or used up: so is this
            else:  # each dict() makes another with a dict(): no encoder gets to the end
                read, replace = unencodable(value), True
        if kind in KEYED_AS_TEXT:
            self._views[key] = (read, self._text(value), replace, False)
        else:
            self._views[key] = (read, None, replace, True)
        return read

    def _text(self, value: Any) -> str | None:
        """``str(value)`` redacted, None when it held no secret."""
        try:
            text = str(value)
        except Exception:  # no text to leak, none to use as a key: its marker
            return unencodable(value)
        clean = self._leaf(text)
        return None if clean is text else cast("str", clean)

    def _items(self, node: Any) -> Iterable[Any]:
        """A container's keys and values (a dict's, interleaved), items or fields' values."""
        if isinstance(node, dict):
            return chain.from_iterable(dict.items(node))
        if isinstance(node, _CONTAINERS):
            return cast("Iterable[Any]", node)
        return [value for _, value in self._fields[id(node)]]

    def _nodes(self, node: Any) -> Iterable[Any]:
        """The containers right in ``node`` (a model's dump for the model), as met first."""
        views = self._views
        for child in self._items(node):
            if type(child) in _SCALARS or isinstance(child, _TEXTS):
                continue
            if views and id(child) in views:
                child = views[id(child)][0]
            if isinstance(child, _CONTAINERS) or id(child) in self._fields:
                yield child

    def _explore(self, root: tuple[Any, ...]) -> tuple[dict[int, Any], list[int], bool]:
        """The parents of each container under ``root`` (an id, or a list of them when
        several; ``root`` has none); the containers holding a text a secret is in, a model
        that cannot be dumped or a container met first too deep (``_too_deep`` then holds
        it); whether a container is met more than once (shared, or in a cycle)."""
        # The hot loop: numbers are skipped before anything else.
        parents: dict[int, Any] = {id(root): []}
        holding: list[int] = []
        shared = False
        stack: list[tuple[Any, int]] = [(root, 0)]
        # Met first past the bound: walked only once some container is met twice, for
        # _bound (in a tree, all of it is under the container cut where the bound is).
        later: list[tuple[Any, int]] = []
        texts = self._texts
        fields = self._fields
        opaque = self._opaque
        while stack or (shared and later):
            if not stack:
                stack = later  # the same list from now on: past the bound, walked at once
            node, depth = stack.pop()
            here = id(node)
            hit = False
            for child in self._items(node):
                kind = type(child)
                if kind in _SCALARS:
                    continue
                if kind is str:
                    text = texts.get(child, _UNSEEN)
                    if text is not None and self._leaf(child) is not child:
                        hit = True
                    continue
                if kind not in _PLAIN and kind not in opaque:
                    read = self._stand_in(child)
                    if read is not child:  # a model's dump, an Enum's value, a marker...
                        _, text, failed, _ = self._views[id(child)]
                        hit = hit or text is not None or failed
                        child = read
                if isinstance(child, _TEXTS):
                    hit = hit or self._leaf(child) is not child
                elif isinstance(child, _CONTAINERS) or id(child) in fields:
                    key = id(child)
                    seen = parents.get(key)
                    if seen is None:
                        parents[key] = here
                        if depth < MAX_DETAIL_DEPTH:
                            stack.append((child, depth + 1))
                            continue
                        later.append((child, depth + 1))
                        if depth == MAX_DETAIL_DEPTH:  # exact in a tree; else _bound's
                            self._too_deep.add(key)
                            hit = True
                    elif type(seen) is list:
                        seen.append(here)
                        shared = True
                    else:
                        parents[key] = [seen, here]
                        shared = True
            if hit:
                holding.append(here)
        return parents, holding, shared

    def _bound(self, root: tuple[Any, ...], parents: dict[int, Any]) -> None:
        """``_too_deep`` made each container some chain of containers not cut reaches
        deeper than ``MAX_DETAIL_DEPTH`` (``parents``: what ``_explore`` met)."""
        # Depth first, for an order with every container after each of its parents but the
        # ones it is an ancestor of (through a cycle): its depth is final when it comes.
        finished: list[Any] = []
        entered: set[int] = set()
        stack: list[tuple[Any, bool]] = [(root, False)]
        while stack:
            node, done = stack.pop()
            if done:
                finished.append(node)
            elif id(node) not in entered:
                entered.add(id(node))
                stack.append((node, True))
                stack.extend((child, False) for child in self._nodes(node) if id(child) in parents)
        at = {id(node): index for index, node in enumerate(finished)}
        depth = {id(root): 0}
        self._too_deep.clear()  # _explore's, by the depth each was met at first
        for node in reversed(finished):
            here = id(node)
            level = depth.get(here)
            if level is None:  # met only under containers cut: not in what is sent
                continue
            if level > MAX_DETAIL_DEPTH:
                # Cut, so what is under it is not met through it (until 12-07 a container
                # met shallow was cut too for being under a cut one elsewhere).
                self._too_deep.add(here)
                continue
            below = level + 1
            for child in self._nodes(node):
                key = id(child)
                if key in at and at[key] < at[here] and depth.get(key, -1) < below:
                    depth[key] = below

    def _rebuild(self, root: tuple[Any, ...], dirty: set[int]) -> tuple[Any, ...]:
        """The copies of the ``dirty`` containers under ``root``, children first."""
        built: dict[int, Any] = {}  # a dict's, list's or dataclass's copy exists while open
        open_last: set[int] = set()
        stack: list[tuple[Any, bool]] = [(root, False)]
        while stack:
            node, children_done = stack.pop()
            here = id(node)
            if children_done:
                built[here] = self._fill(node, built.get(here), built, dirty)
                open_last.discard(here)
                continue
            if here in built or here in open_last:
                continue
            stack.append((node, True))
            if isinstance(node, _BUILT_LAST):
                open_last.add(here)
            else:
                built[here] = shell_of(node)
            for child in self._nodes(node):
                key = id(child)
                if (
                    key in dirty
                    and key not in built
                    and key not in open_last
                    and key not in self._too_deep
                ):
                    stack.append((child, False))
        return cast("tuple[Any, ...]", built[id(root)])

    def _fill(self, node: Any, shell: Any, built: dict[int, Any], dirty: set[int]) -> Any:
        """``node``'s copy: its ``shell`` (a dict's, list's or dataclass's) filled, or a
        tuple or set built."""

        views = self._views

        def copied(child: Any, as_key: bool = False) -> Any:
            if type(child) in _SCALARS:
                return child
            if isinstance(child, _TEXTS):
                return self._leaf(child)
            key = id(child)
            view = views.get(key) if views else None
            if view is not None:
                read, text, failed, keyed = view
                if as_key and not keyed:
                    return child if text is None else text
                out = copied(read)
                return child if out is read and text is None and not failed else out
            if key in self._too_deep:
                return _TOO_DEEP
            return built.get(key, _CYCLE) if key in dirty else child

        def copied_key(child: Any) -> Any:
            out = copied(child, as_key=True)
            if out is not child:
                try:
                    hash(out)
                except TypeError:  # a tuple holding a model's dump: its text (module doc)
                    return self._text(child) or str(child)
            return out

        if isinstance(node, dict):
            pairs = OrderedDict.items(node) if isinstance(node, OrderedDict) else dict.items(node)
            refill(shell, [(copied_key(k), copied(v)) for k, v in pairs])
            return shell
        if not isinstance(node, _CONTAINERS):  # a dataclass: a copy of it, or a dict
            fields = [(name, copied(value)) for name, value in self._fields[id(node)]]
            if isinstance(shell, dict):
                dict.update(shell, fields)
            else:
                for name, value in fields:
                    object.__setattr__(shell, name, value)
            return shell
        items = [copied(item) for item in node]
        if isinstance(node, list):
            list.extend(shell, items)
            return shell
        if isinstance(node, set | frozenset):
            try:
                return set(items) if isinstance(node, set) else frozenset(items)
            except TypeError:  # an item unhashable once redacted: a list (module doc)
                return items
        if isinstance(node, deque):
            return deque(items, node.maxlen)
        if hasattr(node, "_fields"):  # a named tuple
            try:
                return type(node)(*items)
            except Exception:  # its class's own constructor refused: a plain tuple (above)
                return tuple(items)
        return tuple(items)
