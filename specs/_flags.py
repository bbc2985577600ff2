"""Yes/no environment variables: one reading of them for every command and process."""

from __future__ import annotations

from collections.abc import Mapping
from typing import overload

from psych_runtime.specs._errors import SpecError

FLAG_YES = ("1", "true", "yes", "y", "on")
"""What a yes/no variable may say to mean yes (any case, blanks around ignored)."""
FLAG_NO = ("0", "false", "no", "n", "off")
"""What it may say to mean no; set but empty is not set (its default)."""


@overload
def env_flag(environ: Mapping[str, str], name: str, default: bool = False) -> bool: ...
@overload
def env_flag(environ: Mapping[str, str], name: str, default: None) -> bool | None: ...
def env_flag(environ: Mapping[str, str], name: str, default: bool | None = False) -> bool | None:
    """The yes/no variable ``name`` of ``environ``: ``FLAG_YES`` or ``FLAG_NO`` (any case,
    trimmed); ``default`` when it is unset or blank (``export NAME=`` unsets it in effect).

    Every psych switch read from the environment is read here, so ``Y`` means the same to
    ``psych worker``, ``psych run`` and ``psych serve``, and a value that is neither yes nor
    no is refused by each of them rather than taken for no by some.

    Raises:
        SpecError: the value is neither; the message names the variable and the value.
    """
    text = environ.get(name, "")
    word = text.strip().lower()
    if not word:
        return default
    if word in FLAG_YES:
        return True
    if word in FLAG_NO:
        return False
    raise SpecError(
        f"environment variable {name}={text!r} is neither yes nor no: say one of "
        f"{', '.join(FLAG_YES)} or {', '.join(FLAG_NO)} (any case), or leave it unset"
    )
