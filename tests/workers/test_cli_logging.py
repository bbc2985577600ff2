"""How ``psych`` logs (``workers/cli/_logging.py``): a one-shot command prints no log
record unless ``--verbose``; its failure is its one ``psych:`` line. Run as the
executable is (a subprocess: in-process, pytest's own log handlers take the records that
Python's last-resort handler printed)."""

from __future__ import annotations

import argparse
import importlib
import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest

from psych_runtime.workers.cli._logging import SERVING, SHOWN
from psych_runtime.workers.cli._parser import build_parser
from psych_runtime.workers.cli._specs import STORE_LOGGERS
from tests.forking import client as forking

SPEC = "kind: agent\nname: notes\ninstructions: Take notes.\nmodel: {model: m}\n"
REFUSED = "the local version store failed (ENOTDIR: Not a directory)"


def _psych(*argv: str) -> subprocess.CompletedProcess[str]:
    """``python -m psych_runtime.workers.cli ARGV`` (forked: ``tests.forking``)."""
    return forking.run(
        [sys.executable, "-m", "psych_runtime.workers.cli", *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _unwritable_store(tmp_path: Path) -> Path:
    """A version store no one can write, as root too: a file where its directory goes."""
    a_file = tmp_path / "versions"
    a_file.write_text("not a directory")
    return a_file / "inner"


def test_a_publish_the_store_refused_prints_its_one_line_and_no_log_record(
    tmp_path: Path,
) -> None:
    # The store's warning (the same failure, naming the store's path) was printed as a
    # second line, bare, by Python's last-resort handler.
    spec = tmp_path / "agent.yaml"
    spec.write_text(SPEC)
    done = _psych("publish", str(spec), "--store", str(_unwritable_store(tmp_path)))
    assert done.returncode == 1
    assert done.stderr.startswith("psych: Version sha256:"), done.stderr
    assert REFUSED in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_verbose_prints_a_one_shot_commands_log_records_one_line_each(tmp_path: Path) -> None:
    spec = tmp_path / "agent.yaml"
    spec.write_text(SPEC)
    store = _unwritable_store(tmp_path)
    done = _psych("publish", str(spec), "--store", str(store), "--verbose")
    assert done.returncode == 1
    logged, refusal = done.stderr.splitlines()
    assert re.fullmatch(r"\d\d:\d\d:\d\d warning: Version sha256:[0-9a-f]{64} .*", logged)
    assert f"the local version store failed under {store}" in logged
    assert refusal.startswith("psych: ") and REFUSED in refusal


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return [
                found
                for name, sub in action.choices.items()
                for found in _commands(sub, (*path, name))
            ]
    return [(path, parser)]


@pytest.mark.parametrize(
    ("command", "parser"),
    [pytest.param(path, parser, id=" ".join(path)) for path, parser in _commands(build_parser())],
)
def test_every_command_takes_verbose(
    command: tuple[str, ...], parser: argparse.ArgumentParser
) -> None:
    # One-shot commands: this policy's; the serving ones: their console's.
    assert "--verbose" in parser._option_string_actions


@pytest.mark.parametrize("command", sorted(SERVING))
def test_a_serving_command_takes_quiet_but_not_with_verbose(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = build_parser()
    assert parser.parse_args([command, "--quiet"]).quiet
    with pytest.raises(SystemExit) as exited:
        parser.parse_args([command, "--verbose", "--quiet"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--quiet" in err and "--verbose" in err and "not allowed" in err, err


@pytest.mark.parametrize("name", sorted(STORE_LOGGERS))
def test_each_store_logger_a_check_leaves_out_is_its_modules(name: str) -> None:
    # Named, not imported: a renamed module would print the store's path again.
    logger = importlib.import_module(name)._log
    assert isinstance(logger, logging.Logger) and logger.name == name


@pytest.mark.parametrize("name", SHOWN)
def test_each_logger_shown_without_verbose_is_its_modules(name: str) -> None:
    # Named, not imported, by the parser's module: a renamed module would silently hide
    # its warnings again (tests/workers/test_cli_list_foreign.py prints the listing's).
    logger = importlib.import_module(name).logger
    assert isinstance(logger, logging.Logger) and logger.name == name
