"""``psych.a2a.cancel``: ask a peer to cancel the task a Run waited on, when the Run settles
before the task ended (aborted, its wait expired, its deadline). The cancelling half of
``A2aActivities``.

Best effort, as the protocol allows a peer to refuse (a task already ended, or one it
cannot stop): every failure is data in the result, which the workflow records; the
request is one ``CancelTask`` through the egress port with the peer's credential.
"""

from __future__ import annotations

import asyncio

from a2a.types.a2a_pb2 import CancelTaskRequest
from temporalio import activity

from psych_runtime.activities._activity_class import ActivityClass
from psych_runtime.activities.a2a._answer import state_name
from psych_runtime.activities.a2a._peers import Peers, PeerUnavailable, connect, describe
from psych_runtime.activities.a2a._settings import A2aSettings
from psych_runtime.activities.contract import A2A_CANCEL, A2aCancelInput, A2aCancelled
from psych_runtime.activities.secrets import SecretResolver


class Cancelling(ActivityClass):
    """The cancelling side of ``A2aActivities`` (which sets these attributes)."""

    secrets: SecretResolver | None
    settings: A2aSettings
    peers: Peers

    @activity.defn(name=A2A_CANCEL)
    async def cancel(self, input: A2aCancelInput) -> A2aCancelled:
        """Send ``CancelTask`` for the task; the state the peer reports, or why not."""
        peer = input.peer
        try:
            connection = await connect(peer, input.scope, self.secrets)
        except PeerUnavailable as err:
            return A2aCancelled(error=str(err))
        try:
            fetched, _ = await self.peers.card(
                peer, input.scope, connection, fetch_seconds=self.settings.card_timeout_seconds
            )
            transport = self.peers.transport(input.scope, connection, fetched.card)
            task = await asyncio.wait_for(
                transport.cancel_task(
                    CancelTaskRequest(id=input.task_id, tenant=peer.tenant or ""),
                    context=connection.context(self.settings.call_timeout_seconds),
                ),
                self.settings.call_timeout_seconds,
            )
        except asyncio.CancelledError:
            raise
        except TimeoutError:
            return A2aCancelled(error=f"no answer within {self.settings.call_timeout_seconds:g} s")
        except Exception as err:  # the SDK's and httpx's errors alike: recorded as data
            return A2aCancelled(error=connection.redact(describe(err)))
        return A2aCancelled(state=state_name(task.status.state))
