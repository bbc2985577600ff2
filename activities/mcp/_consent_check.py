"""Publish-time ``--check-connections`` of servers behind OAuth: whether a token is held
for the Scope, and what a person must do when none is.

The check reads the workers' token store through ``ReadOnlyTokens``: a held token is used
(and refreshed) as a Run would, but nothing the check obtains or parks is written back,
so checking leaves the store as it found it. A record sealed with the payload keys cannot
be opened here (the check holds no payload keys): it is reported as stored, whether it
opens (one sealed with other keys, or damaged, does not) not known, and it is not used. A
record that cannot be read (damaged, or a store that did not answer) is said to be so, not
to be refused: a person consenting again mends no store. Where the store is (a path, a
bucket) is never said: the store's own warnings naming it are the log's, which the check
prints only with ``--verbose`` (``workers/cli/_specs.py``).
"""

from __future__ import annotations

from psych_runtime.activities.mcp._oauth import unreadable
from psych_runtime.activities.tokens import Change, TokenKey, TokenStore
from psych_runtime.specs import McpServer, Scope, StoreUnavailable

_SEALED = b"psych-blob-v1\0"


class ReadOnlyTokens:
    """A ``TokenStore`` reading ``inner`` (None: nothing held) and keeping what is written
    in memory only."""

    def __init__(self, inner: TokenStore | None) -> None:
        self.inner = inner
        self._written: dict[TokenKey, bytes | None] = {}
        self.sealed: set[TokenKey] = set()
        """Keys whose record is sealed (held, but not readable here)."""

    async def get(self, key: TokenKey) -> bytes | None:
        if key in self._written:
            return self._written[key]
        record = None if self.inner is None else await self.inner.get(key)
        if record is not None and record.startswith(_SEALED):
            self.sealed.add(key)
            return None
        return record

    async def held(self, key: TokenKey) -> tuple[bool, str | None]:
        """Whether the store held a record under ``key`` before the check, and why it
        cannot be read (None: it can, or none is held): damaged, or the store did not
        answer (its message names the store's kind and the key, never where it is)."""
        if self.inner is None:
            return False, None
        try:
            record = await self.inner.get(key)
        except StoreUnavailable as err:
            return False, f"the token store did not answer ({err})"
        if record is None or record.startswith(_SEALED):
            return record is not None, None
        why = unreadable(record, key)
        return True, None if why is None else f"the token record held cannot be read ({why})"

    async def put(self, key: TokenKey, record: bytes) -> None:
        self._written[key] = record

    async def delete(self, key: TokenKey) -> None:
        self._written[key] = None

    async def update(self, key: TokenKey, change: Change) -> None:
        self._written[key] = change(await self.get(key))


def _whose(scope: Scope) -> str:
    who = f"tenant {scope.tenant!r}"
    return who if scope.principal is None else f"{who}, principal {scope.principal!r}"


def oauth_line(
    server: McpServer,
    scope: Scope,
    *,
    held: bool,
    sealed: bool,
    consent: bool,
    unread: str | None = None,
) -> str:
    """What ``--check-connections`` says of ``server``'s OAuth for ``scope``.

    Args:
        held: a token record was stored for the Scope before the check.
        sealed: that record is sealed with the payload keys (not opened here: the check
            holds none, so it is said to be stored, not to hold a token).
        consent: the server asked for a token the Scope does not hold (a person's consent).
        unread: why the record could not be read (``ReadOnlyTokens.held``), if so.
    """
    oauth = server.oauth
    assert oauth is not None
    whose = _whose(scope)
    if unread is not None and not held:
        return (
            f"{unread}: whether a token is held for {whose} is not known, and a Run "
            "cannot reach this server until it answers. Mend the store (the workers' log "
            "names where it is, as this check's does with --verbose) and check again; "
            "consenting again would not help"
        )
    if unread is not None:
        then = (
            f"the worker gets a new one with the client secret {oauth.client_secret_credential!r} "
            "(no person needed)"
            if oauth.grant == "client_credentials"
            else "a person must consent once more (the first Run asks), and the new token "
            "replaces it"
        )
        return (
            f"{unread}, so a Run ignores it (no token was refused): {then}. If the store "
            "should hold it intact, look at the store (its disk or bucket) first"
        )
    if sealed:
        return (
            f"a token record is stored for {whose}, sealed with the payload keys, which this "
            "check does not hold: whether it opens and holds a token the server accepts is "
            "not checked here (a Run's worker opens it with its keys)"
        )
    if oauth.grant == "client_credentials":
        if held:
            return f"a token is held for {whose}"
        return (
            f"no token is held for {whose}; the worker gets one with the client secret "
            f"{oauth.client_secret_credential!r} (no person needed)"
        )
    if held and not consent:
        return f"a token is held for {whose}"
    redirect = oauth.redirect_uris[0] if oauth.redirect_uris else "(no redirect URI)"
    lost = "the token held was refused (revoked or expired); " if held else ""
    return (
        f"{lost}no usable token is held for {whose}: a person must consent. The first Run "
        "suspends for authorization with the link to open (psych status, psych list "
        f"--suspended and the console show it); the redirect to {redirect} must be served "
        "by psych oauth-callback or psych serve (/oauth/callback), which resumes the Run"
    )
