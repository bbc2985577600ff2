"""Where a worker serves its model calls' deltas: settings, environment and flags."""

from __future__ import annotations

import pytest

from psych_runtime.specs import SpecError
from psych_runtime.workers._live import LiveSettings, serving_deltas
from psych_runtime.workers.cli._parser import build_parser
from psych_runtime.workers.cli._processes import settings_from


def test_the_default_is_loopback_on_any_free_port_and_needs_nothing() -> None:
    assert LiveSettings.from_env({}) == LiveSettings(listen="127.0.0.1:0", url=None)


def test_environment_and_flags_set_the_address_and_the_advertised_url(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = {"PSYCH_LIVE_LISTEN": "0.0.0.0:7280", "PSYCH_LIVE_URL": "http://10.0.0.5:7280"}
    assert LiveSettings.from_env(env) == LiveSettings("0.0.0.0:7280", "http://10.0.0.5:7280")
    monkeypatch.setenv("PSYCH_LIVE_LISTEN", "127.0.0.1:1")
    args = build_parser().parse_args(
        ["worker", "--live-listen", "0.0.0.0:7281", "--live-url", "http://pod:7281"]
    )
    assert settings_from(args).live == LiveSettings("0.0.0.0:7281", "http://pod:7281")
    dev = build_parser().parse_args(["dev", "--live-listen", "off"])
    assert settings_from(dev).live.listen == "off"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"PSYCH_LIVE_LISTEN": "7280"}, "must be host:port, got '7280' .*'off'"),
        ({"PSYCH_LIVE_URL": "pod:7280"}, "must start with http:// or https://, got 'pod:7280'"),
    ],
)
def test_a_bad_address_is_refused_naming_it(env: dict[str, str], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        LiveSettings.from_env(env)


async def test_off_serves_nothing_and_the_default_serves_a_hub() -> None:
    async with serving_deltas(LiveSettings(listen="off"), wanted=True) as hub:
        assert hub is None
    async with serving_deltas(LiveSettings(), wanted=False) as hub:
        assert hub is None
    async with serving_deltas(LiveSettings(url="http://example.test:1/"), wanted=True) as hub:
        assert hub is not None and hub.base_url == "http://example.test:1"
    assert not hub.serving
