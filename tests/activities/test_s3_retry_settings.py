"""botocore's own retry settings of the S3 stores (blobs, tokens, Versions): its retry
mode (``AWS_RETRY_MODE``, the profile's ``retry_mode``) and attempts (``AWS_MAX_ATTEMPTS``,
``max_attempts``) are honoured, psych's own (standard, 5) only when unset; a malformed one
is a ``SpecError`` naming where it is set, raised when the store first opens its client.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from psych_runtime.activities.blobs import S3Location, configured_options
from psych_runtime.specs import SpecError
from tests._ports import free_port
from tests._s3_server import S3_ENV
from tests.activities.test_s3_unavailable import KINDS, Kind, at

LOCATION = S3Location(bucket="psych-bucket", endpoint="http://127.0.0.1:9", region="us-east-1")


def _session() -> object:
    import botocore.session

    return botocore.session.get_session()


@pytest.fixture(autouse=True)
def unset(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in S3_ENV.items():  # credentials: what fails is the setting alone
        monkeypatch.setenv(name, value)
    for name in ("AWS_RETRY_MODE", "AWS_MAX_ATTEMPTS", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("mode", ["adaptive", "legacy", "standard"])
def test_botocores_retry_mode_is_honoured(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: "standard" whatever AWS_RETRY_MODE said.
    monkeypatch.setenv("AWS_RETRY_MODE", mode)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "3")
    retries = configured_options(LOCATION, _session())["retries"]
    assert retries == {"mode": mode, "total_max_attempts": 3}


def test_a_profiles_retry_mode_is_honoured(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text("[profile ops]\nretry_mode = adaptive\nmax_attempts = 7\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_PROFILE", "ops")
    retries = configured_options(LOCATION, _session())["retries"]
    assert retries == {"mode": "adaptive", "total_max_attempts": 7}


def test_unset_the_stores_retry_in_standard_mode_five_times() -> None:
    # botocore's own default is legacy: the stores' is standard.
    retries = configured_options(LOCATION, _session())["retries"]
    assert retries == {"mode": "standard", "total_max_attempts": 5}


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("AWS_MAX_ATTEMPTS", "two", "AWS_MAX_ATTEMPTS is 'two': the attempts of one S3 request"),
        ("AWS_MAX_ATTEMPTS", "0", "AWS_MAX_ATTEMPTS is '0': the attempts of one S3 request"),
        ("AWS_RETRY_MODE", "fast", "AWS_RETRY_MODE is 'fast': botocore's retry mode is one of"),
    ],
)
async def test_a_malformed_setting_is_named_when_the_store_opens(
    kind: Kind, variable: str, value: str, said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: AWS_MAX_ATTEMPTS=two raised botocore's bare "ValueError: invalid literal for
    # int() with base 10: 'two'", and AWS_RETRY_MODE was never read.
    monkeypatch.setenv(variable, value)
    with pytest.raises(SpecError) as caught:
        await kind.read(at(f"http://127.0.0.1:{free_port()}"))
    assert str(caught.value).startswith(said), str(caught.value)
