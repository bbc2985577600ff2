"""What a worker holds of its OAuth grants, for redaction only: the access and refresh
tokens last seen per ``TokenKey``, and the secret of a client registered for it
(``_oauth``'s ``StoredTokens`` sees them; a call's ``HeldRedactor`` cleans what a server
sends back of them, as of a bearer credential)."""

from __future__ import annotations

import weakref
from collections.abc import Mapping

from mcp.shared.auth import OAuthToken

from psych_runtime.activities.secrets import Redactor
from psych_runtime.activities.tokens import TokenKey


class _Held:
    """The tokens last seen for one key, shared by every storage and redactor of it, and
    the secret of the client registered for it, if any."""

    __slots__ = ("__weakref__", "secret", "tokens")

    def __init__(self) -> None:
        self.tokens: tuple[str, ...] = ()
        self.secret = ""

    def saw(self, token: OAuthToken) -> None:
        """Hold ``token``'s access and refresh tokens (instead of those held before)."""
        values = (token.access_token, token.refresh_token or "")
        self.tokens = tuple(value for value in values if value)


class TokensHeld:
    """The access and refresh tokens this worker last held per key, for redaction only
    (what a server sends back is cleaned of them, as of a bearer credential).

    An entry lives exactly as long as something that can send or receive the key's token
    does: each ``StoredTokens`` (inside a pooled session's provider) and ``HeldRedactor``
    (inside a call's connection) keeps its key's ``_Held``, and this map keeps it weakly.
    A worker that served many principals over its life so keeps only the keys in use,
    and no entry is dropped while a session could still hand its token to a result.
    """

    def __init__(self) -> None:
        self._held: weakref.WeakValueDictionary[TokenKey, _Held] = weakref.WeakValueDictionary()

    def holder(self, key: TokenKey) -> _Held:
        """The shared entry of ``key`` (a new, empty one when nothing holds it)."""
        held = self._held.get(key)
        if held is None:
            held = self._held[key] = _Held()
        return held

    def __len__(self) -> int:
        return len(self._held)


class HeldRedactor(Redactor):
    """A ``Redactor`` that also redacts the tokens held for one key when it is used: a
    session gets its first token after the call's redactor was made."""

    def __init__(self, secrets: Mapping[str, str], held: TokensHeld, key: TokenKey) -> None:
        super().__init__(secrets)
        self._held = held.holder(key)

    def __call__(self, text: str) -> str:
        for index, token in enumerate(self._held.tokens):
            self.add(f"oauth-token-{index}", token)
        self.add("oauth-client-secret", self._held.secret)
        return super().__call__(text)
