"""The one error hierarchy of psych-runtime.

Every exception the runtime raises on purpose is a `PsychError`::

    PsychError
    ├── SpecError                 a Spec, file or document is malformed (names the path)
    │   └── VersionMismatch       a stated hash does not match the content it came with
    ├── ValidationFailed          publish-time validation found problems (carries them all)
    ├── RegistryError             a tool cannot be registered, or is not registered
    ├── NotFound                  a Version, Run or blob does not exist
    ├── AccessDenied              a Scope asked for another tenant's Run
    ├── NotPermitted              a Spec uses what its tenant is not permitted (names each)
    ├── PermitsUnavailable        the tenant permits could not be asked (names the port's error)
    ├── Refused                   a Run refused a resume, abort or steer (names why)
    ├── RunFailed                 a Run ended in failure; carries its terminal reason
    ├── BlobsUnavailable          a client was asked for stored content it cannot read
    ├── BadCursor                 a listing's cursor is damaged, or was made for another
                                  tenant or other filters (names which)
    ├── BlobUnreadable            a stored blob is there but does not open (damaged, other keys)
    └── StoreUnavailable          a store (blobs, tokens, Versions) did not answer or was
                                  throttled; trying again later may succeed (names the store
                                  kind and what was asked, never where the store is)

Foreign exceptions (pydantic, PyYAML, httpx, temporalio) are mapped to these in one place
per package and re-raised `from` the original.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from psych_runtime.specs._problem import Problem

_E = TypeVar("_E", bound=BaseException)
_OS_FIELDS = ("errno", "strerror", "filename", "filename2")


def _rebuilt(
    cls: type[_E],
    args: tuple[Any, ...],
    state: dict[str, Any],
    os_fields: tuple[Any, ...] | None = None,
) -> _E:
    """An exception of ``cls`` with ``args`` and the attributes ``state``, its ``__init__``
    not run: how every `PsychError` unpickles and copies (``PsychError.__reduce__``).
    ``os_fields``: an ``OSError``'s ``errno``, ``strerror``, ``filename`` and ``filename2``
    (``AccessDenied``, ``NotPermitted``), which are not attributes of its ``__dict__`` and
    which ``OSError`` parses from its constructor's arguments alone."""
    err = cls.__new__(cls)
    err.args = args
    err.__dict__.update(state)
    if os_fields is not None:
        # Only those set: one set to None still counts as given (str() shows "None").
        for name, value in zip(_OS_FIELDS, os_fields, strict=True):
            if value is not None:
                setattr(err, name, value)
    return err


class PsychError(Exception):
    """Base of every error psych-runtime raises on purpose.

    Every one pickles and copies whole (class, ``args``, message, attributes), whatever
    its constructor takes: Python rebuilds an exception by calling its class with its
    ``args``, which a constructor building its message from its arguments (``Refused``,
    ``NotPermitted``, ``ValidationFailed``) does not accept, or turns into another
    message. So each is rebuilt without its ``__init__``, its ``args`` and attributes set
    back (and an ``OSError``'s fields: ``errno``, ``strerror``, ``filename``...).
    """

    def __reduce__(self) -> tuple[Any, ...]:
        if isinstance(self, OSError):
            os_fields = tuple(getattr(self, name) for name in _OS_FIELDS)
            return (_rebuilt, (type(self), self.args, self.__dict__, os_fields))
        return (_rebuilt, (type(self), self.args, self.__dict__))


class SpecError(PsychError, ValueError):
    """A Spec, Version document or Spec file is malformed.

    The message names every offending path (``limits.max_turns: ...``).
    """


class VersionMismatch(SpecError):
    """A document's stated hash does not match the hash of its content."""


class StoreDamaged(SpecError):
    """A stored Version no longer reads back as it was written (cut short, altered, or
    holding another Version): the store's fault, not the caller's. Publishing the same Spec
    again writes it anew."""


class ValidationFailed(PsychError):
    """Publish-time validation found one or more problems.

    Attributes:
        problems: every problem found, in path order.
    """

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = tuple(problems)
        lines = "\n".join(f"  {p}" for p in self.problems)
        super().__init__(f"{len(self.problems)} problem(s):\n{lines}")


class RegistryError(PsychError, ValueError):
    """A tool could not be registered, or a name is not registered."""


class NotFound(PsychError, LookupError):
    """A Version, Run or blob does not exist."""


class AccessDenied(PsychError, PermissionError):
    """A caller's Scope does not own the Run it asked for."""


class NotPermitted(PsychError, PermissionError):
    """A Run was not started: its Spec uses what the tenant is not permitted
    (``TenantPermits``); the message names each tool, server or peer and the tenant.

    Attributes:
        tenant: the tenant the Run was for.
        problems: each thing not permitted, with its path in the Spec.
    """

    def __init__(self, tenant: str, problems: Sequence[Problem]) -> None:
        self.tenant = tenant
        self.problems = tuple(problems)
        lines = "\n".join(f"  {p}" for p in self.problems)
        super().__init__(f"tenant {tenant!r} is not permitted what the Spec uses:\n{lines}")


class PermitsUnavailable(PsychError):
    """A Run was not started: what its tenant is permitted could not be asked (the
    ``TenantPermits`` port raised, or gave no answer within its bound). Nothing is known
    against the Spec; the message names the tenant and the port's error. Worth retrying
    once the port answers again."""


class Refused(PsychError):
    """A Run refused a resume, abort or steer: not suspended, settled, unknown or stale id,
    expired, already answered.

    Attributes:
        kind: the refusal's type (``NotSuspended``, ``UnknownPending``, ``Expired``,
            ``AlreadyAnswered``, ``WrongReason``, ``BadResume``).
    """

    def __init__(self, kind: str, message: str) -> None:
        self.kind = kind
        super().__init__(message)


class RunFailed(PsychError):
    """A Run ended in failure.

    Attributes:
        reason: the terminal reason recorded by the Run.
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class BlobsUnavailable(PsychError):
    """A client was asked for what a Run stored in the blob store (a model call's input
    messages and system prompt) and cannot read it: it was given no blob store, or its
    store does not hold a blob the Run's records name (another store than the workers',
    or the blob was removed since). The message names which, and the ref."""


class BadCursor(PsychError, ValueError):
    """A listing's cursor is not one to continue this listing with: damaged or made up,
    or made for another tenant's listing or one with other filters (the message says
    which)."""


class BlobUnreadable(PsychError):
    """A blob a Run's records name is in the blob store but does not open: its bytes no
    longer hash to its ref (cut short by a crash, or altered), or its seal does not open
    with the reader's keys (altered, or sealed under keys the reader does not hold: a key
    configuration that is not the workers'). Not a missing blob (``BlobsUnavailable``),
    nor the caller's to mend: the store's or the deployment's fault. The message names
    which, never a key, a tenant's keys or the store's location."""


class StoreUnavailable(PsychError):
    """A store (blobs, OAuth tokens, Versions) did not answer: its connection was refused,
    reset or timed out, or it answered that it was throttled or failing (S3's 5xx,
    ``SlowDown``), after the store client's own retries. Transient: an activity it escapes
    from is retried under the activity's retry policy, and a model call it fails is a
    transient failure (the Run's ``transient_retry_budget``). Not a refusal (a bucket that
    does not exist, credentials refused), which no retry mends.

    The message names the store's kind and what was asked (a blob by ref, a Version by
    hash), never the store's location: an endpoint is an internal address, which the
    store logs (a warning) where it raises this.

    Attributes:
        detail: what the store's client said, with the endpoint, bucket and key: for the
            log of the process that asked (a ``psych`` command prints it on its error
            line), never for a Run's record or an API's answer.
    """

    def __init__(self, message: str, *, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail
