"""The settings file's ``a2a`` section: how the worker talks to A2A peers.

Only the global settings file may set it (as ``egress``: a project checkout must not
change how long the worker waits on, or how much it keeps of, other parties' agents)::

    a2a:
      card_ttl_seconds: 60        # a fetched Agent Card answers this long per Scope
      card_timeout_seconds: 10    # a card fetch longer than this: the peer is unreachable
      call_timeout_seconds: 60    # sending one message, or reading its task
      hold_seconds: 5             # a call waits this long for a working task, then the
                                  # Run waits durably (0: at once)
      poll_seconds: 0.25          # between reads while the call holds
      heartbeat_seconds: 2
      max_entries: 256            # cards and transports kept (LRU)
      push_url: https://psych.example.com/a2a-push   # psych serve's peer push route, as
                                  # peers reach it (unset: peers are polled only)

Each key set replaces the one the worker was given (``WorkerSettings.a2a``, code); the
others stay as given.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from psych_runtime.activities.a2a import A2A_SETTING_NAMES, A2aSettings
from psych_runtime.workers._settings_file import unknown_settings


@dataclasses.dataclass(frozen=True)
class A2aSection:
    """An ``a2a:`` section as read: the keys it sets and their values."""

    values: tuple[tuple[str, Any], ...]
    """(setting, value) for each key the section sets, each checked by ``A2aSettings``."""

    def over(self, given: A2aSettings) -> A2aSettings:
        """``given`` with this section's keys replaced."""
        return dataclasses.replace(given, **dict(self.values))


def parse_a2a(value: Any, where: str, problems: list[str]) -> A2aSection | None:
    """The ``a2a`` section at ``where``; every problem goes to ``problems``."""
    if not isinstance(value, dict):
        problems.append(f"{where}: a mapping of {', '.join(A2A_SETTING_NAMES)}")
        return None
    found = len(problems)
    problems += unknown_settings(value, where, A2A_SETTING_NAMES)
    values = tuple((key, value[key]) for key in A2A_SETTING_NAMES if key in value)
    for key, item in values:
        try:
            dataclasses.replace(A2aSettings(), **{key: item})
        except ValueError as err:
            problems.append(f"{where}.{key}: {str(err).partition(': ')[2]}")
    return A2aSection(values) if len(problems) == found else None
