"""``psych.version.publish``: a Spec a Run composed, published through the VersionStore.

A spawned child's Spec is written by the model at run time, so it is not in its parent's
Version. The workflow composes and validates it, and this activity stores it as a Version
of its own; the result (the whole Version, its hash included) is in the parent's history,
so a replayed or reclaimed parent starts the child from the recorded Version instead of
composing it again. Publishing is idempotent per hash, so a retried publish is harmless.
"""

from __future__ import annotations

import asyncio

from temporalio import activity

from psych_runtime.activities._activity_class import ActivityClass
from psych_runtime.activities.contract import VERSION_PUBLISH, VersionPublishInput
from psych_runtime.specs import SpecError, Version, VersionStore, version_hash


class VersionActivities(ActivityClass):
    """Publishing Versions a Run composed, through the worker's ``VersionStore``."""

    def __init__(self, store: VersionStore) -> None:
        """Args:
        store: where Versions are published (the store ``PsychClient`` publishes to,
            so ``psych`` commands find a spawned child's Version by its hash).
        """
        self._store = store

    @activity.defn(name=VERSION_PUBLISH)
    async def publish(self, input: VersionPublishInput) -> Version:
        """Store ``input.spec`` as a Version (or return the one already stored).

        Raises:
            SpecError: the store returned a Version of another Spec (a damaged store).
        """
        # The file store does blocking I/O (fsync): keep it off the worker's event loop.
        version = await asyncio.to_thread(self._store.publish, input.spec)
        expected = version_hash(input.spec)
        if version.hash != expected:
            raise SpecError(
                f"the VersionStore returned Version {version.hash} for a Spec that hashes "
                f"to {expected}"
            )
        activity.logger.info("published %s for Run %s", version.hash, input.run_id)
        return version
