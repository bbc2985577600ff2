"""Where the global settings file is, apart from reading it, and the one wording of a
section's unknown keys (``unknown_settings``).

``psych``'s parser names the default path in its help; reading and binding the file
(``_settings``) imports the hook and egress machinery, which the parser must not.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path


def default_global_settings(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME/psych/settings.yaml`` (default ``~/.config/psych/settings.yaml``)."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "psych" / "settings.yaml"


def unknown_settings(
    section: Mapping[object, object], where: str, known: Sequence[str]
) -> list[str]:
    """One problem per key of ``section`` (at ``where``) not in ``known``, naming what is
    known in the order given; keys in sorted order."""
    names = ", ".join(known)
    unknown = sorted(set(section) - set(known), key=str)
    return [f"{where}.{key}: unknown setting (known: {names})" for key in unknown]
