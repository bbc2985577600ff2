"""A read's timeout a caller gives that Temporal's SDK would take as no timeout at all (zero:
its ``rpc_timeout`` is then none, and the read waits forever) is refused where it is given,
naming the setting: ``ServeSettings.query_timeout_seconds`` and ``PsychClient``'s
``query_timeout`` and ``rpc_timeout``. Nothing is asked of Temporal (a lazy client of a
loopback port nothing answers at)."""

from __future__ import annotations

import math
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from psych_runtime.activities.versions import FileVersionStore
from psych_runtime.specs import Scope
from psych_runtime.workers.serve import AuthSettings, ServeSettings
from psych_runtime.workflows import PsychClient

from ._app import KEYS

RUN = "psych-acme-r0123456789abcdef"
SCOPE = Scope(tenant="acme")


async def _client(home: Path) -> PsychClient:
    temporal = await Client.connect(
        "127.0.0.1:9", lazy=True, data_converter=pydantic_data_converter
    )
    return PsychClient(temporal, store=FileVersionStore(home / "versions"))


@pytest.mark.parametrize("seconds", [0, 0.0, -1.0, math.nan, math.inf])
async def test_serve_settings_refuse_a_query_timeout_that_is_no_timeout(
    tmp_path: Path, seconds: float
) -> None:
    client = await _client(tmp_path)
    with pytest.raises(ValueError, match=r"^ServeSettings\.query_timeout_seconds: a positive"):
        ServeSettings(client, AuthSettings(KEYS), query_timeout_seconds=seconds)
    assert ServeSettings(client, AuthSettings(KEYS), query_timeout_seconds=0.5)


@pytest.mark.parametrize("seconds", [4e-7, 1e14])
async def test_serve_settings_refuse_a_query_timeout_no_read_can_be_given(
    tmp_path: Path, seconds: float
) -> None:
    # Positive and finite, but the routes wait ``timedelta(seconds=...)``: under half a
    # microsecond that is timedelta(0), no timeout at all to the SDK (a Run's event
    # stream's describe waited forever); past ~2.7 million years it overflows (every read
    # failed, a 500). Refused where given, as zero is.
    client = await _client(tmp_path)
    with pytest.raises(ValueError, match=r"^ServeSettings\.query_timeout_seconds: a positive"):
        ServeSettings(client, AuthSettings(KEYS), query_timeout_seconds=seconds)
    assert ServeSettings(client, AuthSettings(KEYS), query_timeout_seconds=1e-6)


@pytest.mark.parametrize("seconds", [0, -3])
async def test_a_clients_reads_refuse_a_timeout_that_is_no_timeout(
    tmp_path: Path, seconds: int
) -> None:
    client = await _client(tmp_path)
    wait = timedelta(seconds=seconds)
    refused = rf"^query_timeout: a positive time to wait, not {seconds} s "
    with pytest.raises(ValueError, match=refused):
        await client.status(RUN, scope=SCOPE, query_timeout=wait)
    with pytest.raises(ValueError, match=refused):
        await client.records(RUN, scope=SCOPE, query_timeout=wait)
    with pytest.raises(ValueError, match=refused):
        await client.report(RUN, scope=SCOPE, query_timeout=wait)
    with pytest.raises(ValueError, match=refused):
        await client.result(RUN, scope=SCOPE, query_timeout=wait)
    with pytest.raises(ValueError, match=rf"^rpc_timeout: a positive time to wait, not {seconds}"):
        await client.closed(RUN, scope=SCOPE, rpc_timeout=wait)
