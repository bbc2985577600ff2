"""Redaction: resolved secret values out of everything derived from an upstream response.

An activity sends a secret (a tool's credential, the model endpoint's API key) in a request
header; a server may echo it back (an error page listing the request headers, a 401 body
quoting the key). Whatever the activity then returns, raises or logs would carry it into
workflow history, records, reports, blobs and the next request to the model provider. So
each activity builds one ``Redactor`` from the values it resolved and passes every text it
derives from the response through it before returning or logging.

A value is replaced in the forms a server is likely to echo: verbatim (which also covers
``Bearer <value>``), percent-encoded, JSON-escaped (as Python writes it, and as PHP and Go
do by default: ``\\/`` for ``/``; ``\\u0026``, ``\\u003c``, ``\\u003e`` for ``&``, ``<``,
``>``), HTML-escaped and base64 (standard and URL-safe, with or without padding), each by
``[REDACTED:<name>]``.
"""

from __future__ import annotations

import base64
import copy
import html
import json
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import chain
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote, quote_plus

if TYPE_CHECKING:
    from temporalio.exceptions import FailureError


def _temporal_failure(err: BaseException) -> FailureError | None:
    """``err`` if it is a Temporal ``FailureError``. Looked up, not imported: a process
    that never loaded temporalio has none, and a light command (``psych validate``) that
    redacts must not pay for importing it."""
    exceptions = sys.modules.get("temporalio.exceptions")
    if exceptions is not None and isinstance(err, exceptions.FailureError):
        return cast("FailureError", err)
    return None


def _forms(value: str) -> set[str]:
    """The texts a server may echo ``value`` as."""
    raw = value.encode()
    b64 = base64.b64encode(raw).decode()
    urlsafe = base64.urlsafe_b64encode(raw).decode()
    forms = {
        value,
        quote(value, safe=""),
        quote_plus(value),
        html.escape(value),
        b64,
        b64.rstrip("="),
        urlsafe,
        urlsafe.rstrip("="),
    }
    for escaped in (json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]):
        forms.add(escaped)
        forms.add(escaped.replace("/", "\\/"))  # PHP's json_encode escapes "/"
        forms.add(escaped.translate(_GO_JSON))  # Go's encoding/json escapes &, <, >
    forms.discard("")
    return forms


_GO_JSON = str.maketrans({char: f"\\u{ord(char):04x}" for char in "&<>"})
"""``&``, ``<`` and ``>`` as Go's ``encoding/json`` writes them in a string."""


class Redactor:
    """Replaces each secret value (in its echoed forms) by ``[REDACTED:<name>]``.

    Build one per activity call from the values resolved for it; it holds them only as
    long as the call does. Its repr shows names, never values.
    """

    def __init__(self, secrets: Mapping[str, str] | None = None) -> None:
        """Redact ``secrets``, a mapping of credential name to resolved value.

        Empty values are ignored (there is nothing to find). A value is redacted wherever
        it occurs, however short: a leaked secret costs more than a garbled word.
        """
        self._secrets: dict[str, str] = {}
        self._table: list[tuple[str, str]] = []
        for name, value in (secrets or {}).items():
            self.add(name, value)

    @property
    def names(self) -> tuple[str, ...]:
        """The names of the secrets redacted."""
        return tuple(sorted(self._secrets))

    def add(self, name: str, value: str) -> None:
        """Redact ``value`` (resolved as ``name``) from now on."""
        if not value:
            return
        self._secrets[name] = value
        table = [
            (form, f"[REDACTED:{secret}]")
            for secret, known in self._secrets.items()
            for form in _forms(known)
        ]
        # Longest first, so a form containing another (a value and its base64, say) is
        # replaced whole rather than leaving pieces of itself behind.
        table.sort(key=lambda pair: len(pair[0]), reverse=True)
        self._table = table

    def __call__(self, text: str) -> str:
        """``text`` with every form of every secret replaced."""
        for form, marker in self._table:
            if form in text:
                text = text.replace(form, marker)
        return text

    def scrub(self, err: BaseException) -> BaseException:
        """``err`` with its message and its causes' messages redacted.

        Temporal serialises an activity failure's cause chain (each message) into history,
        and a worker's log prints it, so a cause built from response text (a parse error
        quoting the body, a protocol error quoting a header line) must be clean too. A link
        whose message cannot be rewritten in place (a class with its own ``__str__``, such
        as pydantic's ValidationError) is replaced by a ``RedactedError`` carrying the
        redacted message; the rest of the chain is kept. A Temporal ``FailureError`` (an
        ``ApplicationError``, ``LocalStoreFailed``) keeps its class and fields, its
        ``message`` and details redacted (``_scrub_failure``).

        A failure decoded from Temporal (a child's, an activity's) keeps the proto it was
        decoded from, which the failure converter sends as it is, unredacted; when the
        chain held a secret it is dropped, and with it the remote stack trace. That trace
        cannot be kept without the proto: the converter takes a failure's stack trace from
        its proto or else from its Python ``__traceback__`` only, and a proto rebuilt here
        would bypass the worker's failure converter (the codec's, which encrypts messages
        and stack traces as encoded attributes) for every cause beneath it.
        """
        head, changed = self._scrub_one(err)
        chain = [head]
        seen = {id(head)}
        link = head
        while True:
            if link.__cause__ is not None:
                nxt, hit = self._scrub_one(link.__cause__)
                link.__cause__ = nxt
            elif link.__context__ is not None:
                nxt, hit = self._scrub_one(link.__context__)
                link.__context__ = nxt
            else:
                break
            changed = changed or hit
            if id(nxt) in seen:  # a cycle (possible with __context__): every link is done
                break
            seen.add(id(nxt))
            chain.append(nxt)
            link = nxt
        if changed:
            # A FailureError decoded from a Temporal failure keeps that proto, and the
            # failure converter sends it as it is (its message, its causes) instead of the
            # fields: dropped, so what is sent is the redacted chain (the proto's remote
            # stack trace goes with it: see above).
            for link in chain:
                failure = _temporal_failure(link)
                if failure is not None and failure.failure is not None:
                    failure._failure = None
        return head

    def _scrub_one(self, err: BaseException) -> tuple[BaseException, bool]:
        """The link redacted, and whether anything in it was."""
        failure = _temporal_failure(err)
        failed = failure is not None and self._scrub_failure(failure)
        text = str(err)
        clean = self(text)
        if clean == text:
            return err, failed
        # Exception.__str__ shows args; classes computing their text differently keep it.
        err.args = (clean,)
        if str(err) == clean:
            return err, True
        replacement = RedactedError(f"{type(err).__name__}: {clean}")
        replacement.__cause__ = err.__cause__
        replacement.__context__ = err.__context__
        replacement.__suppress_context__ = err.__suppress_context__
        replacement.__traceback__ = err.__traceback__
        return replacement, True

    def _scrub_failure(self, err: FailureError) -> bool:
        """Redact a Temporal failure's ``message`` (what the failure converter sends and
        ``ApplicationError.__str__`` does not show: it shows ``args``) and its details (an
        ``ApplicationError``'s or a ``CancelledError``'s; a ``TimeoutError``'s last
        heartbeat details), strings and bytes and those inside dicts, lists and tuples, nested
        (``_DetailsWalk``, which also cuts details nested too deep to encode); whether any of
        it changed.

        In place, so its class (a ``StoreUnavailable`` that is an ``ApplicationError``) and
        its ``type``, ``non_retryable`` and cause stay. temporalio gives neither field a
        setter, hence the private names.
        """
        changed = False
        clean = self(err.message)
        if clean != err.message:
            err._message = clean
            changed = True
        exceptions = sys.modules["temporalio.exceptions"]  # loaded: err is one of its failures
        if isinstance(err, exceptions.ApplicationError | exceptions.CancelledError):
            details = self._walked(err.details)
            if details is not None:
                err._details = details
                changed = True
        if isinstance(err, exceptions.TimeoutError):
            beat = self._walked(err.last_heartbeat_details)
            if beat is not None:
                err._last_heartbeat_details = beat
                changed = True
        return changed

    def _walked(self, details: Sequence[Any]) -> tuple[Any, ...] | None:
        """``details`` redacted and bounded (``_DetailsWalk``), or None when nothing in them
        changed (no secret, nothing nested too deep)."""
        given = tuple(details)
        walked = _DetailsWalk(self)(given)
        return None if walked is given else walked

    def __repr__(self) -> str:
        return f"Redactor(names={list(self.names)!r})"


class RedactedError(Exception):
    """Stands in, in a failure's cause chain, for an exception whose text held a secret."""


class _DetailsWalk:
    """One walk of a failure's details for ``Redactor._walked``: the strings and ``bytes``
    in them redacted, inside dicts (keys too), lists and tuples, nested.

    Without recursion (an explicit stack), so it never raises ``RecursionError``; and a
    container nested deeper than ``MAX_DETAIL_DEPTH`` is replaced by ``_TOO_DEEP`` whether
    or not it held a secret, so what the walk returns is something the payload converter
    can encode (until 12-07 details ~1,000 deep raised ``RecursionError`` out of ``scrub``).

    Two passes. The first visits each container once (by identity, so a cycle or a shared
    container costs one visit) and finds the ones that hold, at any depth, a text a secret
    is in or a container too deep; a text met again (a key in each of 100k dicts) is looked
    up, not scanned again. The second rebuilds those containers only: the rest, and every
    text without a secret, stay the very objects. (A container shared by several parents is
    walked once, at the depth the walk meets it first: met too deep anywhere, it is replaced
    everywhere; met again only somewhat deeper, what is under it may nest past the bound.)

    ``bytes`` are read as UTF-8; bytes that are not valid UTF-8 are kept as they are around
    what is replaced (``surrogateescape``), so a secret in a binary body is redacted too and
    the rest comes back byte for byte. A ``str`` or ``bytes`` subclass is read through its
    base class (its own ``__hash__``, ``__eq__`` or ``decode`` may fail or hide a secret).
    ``bytearray`` and other types are left as they are.

    A rebuilt ``dict`` or ``list`` subclass (``OrderedDict``, ``defaultdict``, a class of
    the activity's) keeps its class and its attributes: a shallow ``copy.copy``, its
    contents then replaced through ``dict``'s or ``list``'s own methods, not the subclass's
    (the attributes are not walked). One ``copy.copy`` fails for comes back a plain
    ``dict`` or ``list``. A named tuple stays one (one that cannot be built from its items
    becomes a plain tuple, as does any other tuple subclass). A cycle through a rebuilt
    ``dict`` or ``list`` is rebuilt too (the copy refers to the copy); a reference back to
    a tuple still being rebuilt (met only through a cycle) cannot be filled in afterwards
    and becomes ``_CYCLE``.
    """

    def __init__(self, redact: Callable[[str], str]) -> None:
        self._redact = redact
        self._texts: dict[str, str | None] = {}
        self._blobs: dict[bytes, bytes | None] = {}
        self._too_deep: set[int] = set()

    def __call__(self, root: tuple[Any, ...]) -> tuple[Any, ...]:
        """``root`` redacted; ``root`` itself when nothing in it held a secret or nested
        too deep."""
        dirty = self._dirty(root)
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

    def _dirty(self, root: tuple[Any, ...]) -> set[int]:
        """The ids of the containers under ``root`` (itself too) holding a secret, at any
        depth: those holding one themselves, then whatever contains one of them."""
        # id -> the id of the container it was met in, or a list of them when several;
        # also the containers seen. The hot loop: numbers are skipped before anything else.
        parents: dict[int, Any] = {id(root): []}
        holding: list[int] = []
        stack: list[tuple[Any, int]] = [(root, 0)]
        texts = self._texts
        while stack:
            node, depth = stack.pop()
            here = id(node)
            hit = False
            for child in _children(node):
                kind = type(child)
                if kind in _SCALARS:
                    continue
                if kind is str:
                    text = texts.get(child, _UNSEEN)
                    if text is not None and self._leaf(child) is not child:
                        hit = True
                elif isinstance(child, _TEXTS):
                    hit = hit or self._leaf(child) is not child
                elif isinstance(child, _CONTAINERS):
                    key = id(child)
                    if depth == MAX_DETAIL_DEPTH:
                        self._too_deep.add(key)
                        hit = True
                        continue
                    seen = parents.get(key)
                    if seen is None:
                        parents[key] = here
                        stack.append((child, depth + 1))
                    elif type(seen) is list:
                        seen.append(here)
                    else:
                        parents[key] = [seen, here]
            if hit:
                holding.append(here)
        dirty = set(holding)
        while holding:
            up = parents[holding.pop()]
            for parent in up if type(up) is list else (up,):
                if parent not in dirty:
                    dirty.add(parent)
                    holding.append(parent)
        return dirty

    def _rebuild(self, root: tuple[Any, ...], dirty: set[int]) -> tuple[Any, ...]:
        """The copies of the ``dirty`` containers under ``root``, children first."""
        built: dict[int, Any] = {}  # a dict's or list's copy exists (empty) while it is open
        open_tuples: set[int] = set()
        stack: list[tuple[Any, bool]] = [(root, False)]
        while stack:
            node, children_done = stack.pop()
            here = id(node)
            if children_done:
                built[here] = self._fill(node, built.get(here), built, dirty)
                open_tuples.discard(here)
                continue
            if here in built or here in open_tuples:
                continue
            stack.append((node, True))
            if isinstance(node, tuple):
                open_tuples.add(here)
            else:
                built[here] = _shell(node)
            for child in _children(node):
                key = id(child)
                if (
                    key in dirty
                    and key not in built
                    and key not in open_tuples
                    and key not in self._too_deep
                ):
                    stack.append((child, False))
        return cast("tuple[Any, ...]", built[id(root)])

    def _fill(self, node: Any, shell: Any, built: dict[int, Any], dirty: set[int]) -> Any:
        """``node``'s copy: its ``shell`` (a dict's or list's) filled, or a tuple built."""

        def copied(child: Any) -> Any:
            if isinstance(child, _TEXTS):
                return self._leaf(child)
            key = id(child)
            if key in self._too_deep:
                return _TOO_DEEP
            return built.get(key, _CYCLE) if key in dirty else child

        if isinstance(node, dict):
            dict.update(shell, [(copied(k), copied(v)) for k, v in dict.items(node)])
            return shell
        items = [copied(item) for item in node]
        if isinstance(node, list):
            list.extend(shell, items)
            return shell
        if hasattr(node, "_fields"):  # a named tuple
            try:
                return type(node)(*items)
            except Exception:  # its class's own constructor refused: a plain tuple (above)
                return tuple(items)
        return tuple(items)


_SCALARS = frozenset({int, float, bool, type(None)})
"""What a walk skips at once (no text in it)."""
_TEXTS = (str, bytes)
_CONTAINERS = (dict, list, tuple)

MAX_DETAIL_DEPTH = 100
"""How deep a failure's details may nest (a detail itself is at depth 1): deeper, a
container becomes ``_TOO_DEEP``. Well within what the payload converter's JSON encoder
(recursion-limited, ~1,000 frames less the worker's own) and a decoding workflow can take:
a failure whose details it cannot encode goes out as "Failed building exception result",
retryable and without its type."""

_TOO_DEEP = f"[TRUNCATED:deeper than {MAX_DETAIL_DEPTH}]"
"""What a rebuilt container holds instead of a container nested deeper than
``MAX_DETAIL_DEPTH``."""

_UNSEEN: Any = object()
"""A text the walk has not scanned yet."""

_CYCLE = "[TRUNCATED:cycle]"
"""What a rebuilt container holds instead of a reference back to a tuple still being
rebuilt (``_DetailsWalk``)."""


def _children(node: Any) -> Iterable[Any]:
    """A container's keys and values (a dict's, interleaved) or items."""
    return chain.from_iterable(dict.items(node)) if isinstance(node, dict) else node


def _shell(node: dict[Any, Any] | list[Any]) -> dict[Any, Any] | list[Any]:
    """An empty container of ``node``'s class (with its attributes) to fill with its
    redacted contents; a plain one when the class is ``dict``/``list`` or cannot be
    copied."""
    if type(node) is dict or type(node) is list:
        return type(node)()
    plain: dict[Any, Any] | list[Any] = {} if isinstance(node, dict) else []
    try:
        shell = copy.copy(node)
    except Exception:  # the subclass's own copying failed: a plain one (_DetailsWalk)
        return plain
    if not isinstance(shell, type(plain)):  # a copy that is no dict (list) at all
        return plain
    if isinstance(shell, dict):
        dict.clear(shell)
    else:
        list.clear(shell)
    return shell
