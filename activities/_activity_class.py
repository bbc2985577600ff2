"""Activity classes list their own activities, so a worker's list cannot drift from them."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

# temporalio marks each ``@activity.defn`` callable with this attribute and offers no
# public accessor for it; reading the marker is what the SDK itself does at registration.
_DEFINITION_ATTRIBUTE = "__temporal_activity_definition"


def activity_name(fn: Callable[..., Any]) -> str | None:
    """The Temporal activity name ``fn`` was defined with, or None when it is no activity."""
    definition = getattr(fn, _DEFINITION_ATTRIBUTE, None)
    if definition is None:
        return None
    name: str | None = definition.name
    return name


class ActivityClass:
    """Base of the classes whose methods are activities (``ModelActivities``, ...).

    ``activities()`` finds the ``@activity.defn`` methods by introspection, so adding one to
    a class registers it on every worker with no second list to update.
    """

    def activities(self) -> list[Callable[..., Any]]:
        """The bound ``@activity.defn`` methods of this instance, in attribute-name order,
        ready for ``Worker(activities=...)``."""
        # Looked up on the class, so a property is never run just to be inspected.
        return [
            getattr(self, name)
            for name, member in inspect.getmembers(type(self))
            if activity_name(member) is not None
        ]
