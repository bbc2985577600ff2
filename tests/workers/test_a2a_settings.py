"""The settings file's ``a2a:`` section: read from the global file only, each key it sets
replacing the worker's own ``WorkerSettings.a2a``, bad keys and values named."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from psych_runtime.activities.a2a import A2aActivities, A2aSettings
from psych_runtime.activities.egress import Egress, EgressSettings
from psych_runtime.specs import SpecError
from psych_runtime.workers._settings import worker_a2a
from psych_runtime.workers._worker import WorkerSettings, activities_for


def test_the_global_files_keys_replace_the_workers_own(tmp_path: Path) -> None:
    path = tmp_path / "settings.yaml"
    path.write_text("a2a:\n  hold_seconds: 0\n  card_ttl_seconds: 5\n  max_entries: 8\n")
    given = A2aSettings(call_timeout_seconds=30, card_ttl_seconds=90)
    got = worker_a2a(given, path, cwd=tmp_path, environ={})
    assert got == A2aSettings(
        call_timeout_seconds=30, card_ttl_seconds=5, hold_seconds=0, max_entries=8
    )
    # No section: the worker's own, untouched.
    path.write_text("hooks: {}\n")
    assert worker_a2a(given, path, cwd=tmp_path, environ={}) is given


async def test_a_workers_peer_activities_run_with_the_files_settings(tmp_path: Path) -> None:
    path = tmp_path / "settings.yaml"
    path.write_text("a2a: {hold_seconds: 0.5, call_timeout_seconds: 12}\n")
    settings = WorkerSettings(
        settings_file=path, a2a=A2aSettings(card_timeout_seconds=3), egress=EgressSettings()
    )
    egress = Egress(settings.egress)
    try:
        owners = {getattr(a, "__self__", None) for a in activities_for(settings, egress)}
        [peers] = [owner for owner in owners if isinstance(owner, A2aActivities)]
    finally:
        await egress.aclose()
    assert peers.settings == A2aSettings(
        card_timeout_seconds=3, hold_seconds=0.5, call_timeout_seconds=12
    )


def test_only_the_global_file_may_set_it_and_bad_keys_and_values_are_named(
    tmp_path: Path,
) -> None:
    project = tmp_path / ".psych" / "settings.yaml"
    project.parent.mkdir()
    project.write_text("a2a: {hold_seconds: 1}\n")
    with pytest.raises(SpecError, match="a2a: only the global settings file may set it"):
        worker_a2a(A2aSettings(), None, trust_project_settings=True, cwd=tmp_path, environ={})
    path = tmp_path / "global.yaml"
    path.write_text("a2a:\n  hold_seconds: -1\n  poll_seconds: soon\n  retries: 3\n")
    with pytest.raises(SpecError) as raised:
        worker_a2a(A2aSettings(), path, cwd=tmp_path, environ={})
    message = str(raised.value)
    assert "a2a.retries: unknown setting (known: card_ttl_seconds," in message
    assert "a2a.hold_seconds: 0 or more, not -1" in message
    assert "a2a.poll_seconds: a number, not 'soon'" in message
    path.write_text("a2a: [hold_seconds]\n")
    with pytest.raises(SpecError, match="a2a: a mapping of card_ttl_seconds"):
        worker_a2a(A2aSettings(), path, cwd=tmp_path, environ={})


def test_settings_in_code_out_of_range_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"A2aSettings.max_entries: more than 0, not 0"):
        A2aSettings(max_entries=0)
    with pytest.raises(ValueError, match=r"A2aSettings.card_ttl_seconds: a number"):
        dataclasses.replace(A2aSettings(), card_ttl_seconds="1")  # type: ignore[arg-type]


def test_a_push_url_is_an_http_url_with_a_host(tmp_path: Path) -> None:
    path = tmp_path / "settings.yaml"
    path.write_text("a2a: {push_url: 'https://psych.example.com/a2a-push'}\n")
    got = worker_a2a(A2aSettings(), path, cwd=tmp_path, environ={})
    assert got.push_url == "https://psych.example.com/a2a-push"
    path.write_text("a2a: {push_url: 'ftp://psych.example.com/'}\n")
    with pytest.raises(SpecError, match=r"a2a.push_url: an http\(s\) URL with a host"):
        worker_a2a(A2aSettings(), path, cwd=tmp_path, environ={})
