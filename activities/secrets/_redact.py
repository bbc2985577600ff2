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
import html
import json
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote, quote_plus

from psych_runtime.activities.secrets._details import _DetailsWalk

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
        heartbeat details), every secret in them (``_details``: strings and bytes, inside
        dicts, lists, tuples, sets, dataclasses, pydantic models, Enum members, URLs and
        any iterable, nested), cutting details
        nested too deep to encode; whether any of it changed.

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
