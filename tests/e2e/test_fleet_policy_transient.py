"""A worker's start asks the server which workers poll its task queue (the fleet's
approval policy check): a transient failure of that ask is asked again, not the end of the
worker's start (a CI run saw a server under load answer it CANCELLED)."""

from __future__ import annotations

import grpc
import pytest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from psych_runtime.activities.tools import RulePolicy
from psych_runtime.workers.fleet._policy import DESCRIBE_TRIES, check_fleet_policy

from ._grpc_relay import relayed
from .conftest import Harness

pytestmark = pytest.mark.e2e

DESCRIBE = "DescribeTaskQueue"


async def test_a_transient_failure_of_the_fleet_check_is_asked_again(harness: Harness) -> None:
    target = harness.env.client.service_client.config.target_host
    async with relayed(target) as relay:
        client = await Client.connect(relay.target, namespace=harness.env.client.namespace)
        queue = harness.settings.task_queue
        relay.fail_next(DESCRIBE, grpc.StatusCode.CANCELLED, times=2)
        await check_fleet_policy(client, queue, RulePolicy())
        cancelled, ok = grpc.StatusCode.CANCELLED, grpc.StatusCode.OK
        # Asked again after each, then once more for the activity pollers.
        assert relay.of(DESCRIBE) == [cancelled, cancelled, ok, ok]

        # Past the tries, the failure stops the start; a refusal stops it at once.
        relay.fail_next(DESCRIBE, grpc.StatusCode.CANCELLED, times=DESCRIBE_TRIES)
        with pytest.raises(RPCError) as failed:
            await check_fleet_policy(client, queue, RulePolicy())
        assert failed.value.status is RPCStatusCode.CANCELLED
        asked = len(relay.of(DESCRIBE))
        relay.fail_next(DESCRIBE, grpc.StatusCode.PERMISSION_DENIED)
        with pytest.raises(RPCError) as refused:
            await check_fleet_policy(client, queue, RulePolicy())
        assert refused.value.status is RPCStatusCode.PERMISSION_DENIED
        assert relay.of(DESCRIBE)[asked:] == [grpc.StatusCode.PERMISSION_DENIED]
