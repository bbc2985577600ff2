"""What a local store's disk error (an ``OSError``: a disk full, a read-only or unreadable
directory, an I/O error) becomes: ``LocalStoreFailed``, a ``StoreUnavailable`` naming what
was asked (a blob by ref; for the other local stores, a Version by hash, a token record by
key), the store's kind and the errno, never the path (an ``OSError``'s words name it), which
goes to the worker's log only, as an S3 store's endpoint does (``s3_answering``)."""

from __future__ import annotations

import errno
import logging
from collections.abc import Iterator
from contextlib import contextmanager

from temporalio.exceptions import ApplicationError

from psych_runtime.activities.contract import ErrorType
from psych_runtime.specs import StoreUnavailable

_log = logging.getLogger(__name__)

STORE_KIND = "local blob store"
"""How a ``LocalStoreFailed`` of a ``LocalBlobStore`` names it (never where it is); the
other local stores name themselves (``disk_answering``'s ``kind``)."""

_PASSING = frozenset(
    {
        errno.ENOSPC,
        errno.EDQUOT,
        errno.EIO,
        errno.EMFILE,
        errno.ENFILE,
        errno.ENOMEM,
        errno.EAGAIN,
        errno.EINTR,
        errno.EBUSY,
        errno.ETIMEDOUT,
        errno.ESTALE,
    }
)
"""Errnos that may pass without anyone mending the store's configuration: space freed, a
file handle or memory given back, a shared volume's server back. Any other (permission
refused, read-only, not a directory) lasts until the deployment is mended. Why an I/O
error passes: docs/decisions/activities.md ("One judgement of a local disk's error")."""

_FULL = frozenset({"ENOSPC", "EDQUOT"})
"""The errnos of a disk or a quota that is full (``LocalStoreFailed.full``)."""


class LocalStoreFailed(ApplicationError, StoreUnavailable):
    """A local store's disk refused a read or a write (a ``LocalBlobStore``'s, a
    ``LocalTokenStore``'s, a ``FileVersionStore``'s): ``<what>: the <kind> failed (<errno
    name>: <strerror>)``, the path only in the worker's log (``detail``).

    A ``StoreUnavailable``, so whatever handles a store that did not answer handles it (a
    tool's outcome of a call not safe to repeat that ran: ``ResultNotKept``; a model call:
    ``classify``). ``lasting``: the errno is not one that passes by itself (``_PASSING``):
    a model call then fails not transient, as no retry of the Run's budget mends a
    read-only or unwritable directory. And a Temporal ``ApplicationError`` of type
    ``LocalStoreFailed`` (the type it travelled under as a plain exception), non-retryable
    when it lasts: an activity it escapes from fails at once instead of after its retry
    policy's attempts (the policies live in the workflow, which cannot know every errno).
    ``psych serve`` answers it after the same judgement (``_problems.problem_of``).

    Attributes:
        ref: what was read or written: a blob's ref, a Version's hash, a token record's key
            (empty for a listing of Versions).
        errno_name: the errno's symbol (``ENOSPC``), or the exception's type without one.
        lasting: as said.
    """

    def __init__(
        self, message: str, *, ref: str, errno_name: str, lasting: bool, detail: str = ""
    ) -> None:
        super().__init__(message, type=ErrorType.LOCAL_STORE_FAILED, non_retryable=lasting)
        # Said as a StoreUnavailable is (an API's detail, the model's words, psych's error
        # line), not as ApplicationError says itself ("LocalStoreFailed: <message>").
        self.args = (message,)
        self.detail = detail
        self.ref = ref
        self.errno_name = errno_name
        self.lasting = lasting

    @property
    def full(self) -> bool:
        """Whether the disk or the store's quota is full (``ENOSPC``, ``EDQUOT``): it passes
        once space is freed, by someone, not by itself within a client's retries."""
        return self.errno_name in _FULL


@contextmanager
def disk_answering(what: str, ref: str, root: str, *, kind: str = STORE_KIND) -> Iterator[None]:
    """The block's file operations on ``ref``'s file under ``root``; an ``OSError`` raises
    ``LocalStoreFailed`` saying ``<what>: the <kind> failed (<errno>: <why>)`` (``kind``:
    the store's, ``local blob store`` by default), unchained (the ``OSError``'s words name
    the path, and an activity's failure carries its causes' messages into the Run's
    history), and logs the path as a warning.

    Raises:
        LocalStoreFailed: as said.
    """
    try:
        yield
    except OSError as err:
        code = err.errno
        name = errno.errorcode.get(code) if code else None
        if name is None:
            name = type(err).__name__  # raised without an errno: its words may name a path
        how = f"{name}: {err.strerror}" if err.strerror else name
        detail = f"under {root}: {err}"
        _log.warning("%s: the %s failed %s", what, kind, detail)
        raise LocalStoreFailed(
            f"{what}: the {kind} failed ({how})",
            ref=ref,
            errno_name=name,
            lasting=code not in _PASSING,
            detail=detail,
        ) from None
