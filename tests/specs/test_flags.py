"""``env_flag``: the one reading of every yes/no environment variable."""

from __future__ import annotations

import pytest

from psych_runtime.specs import SpecError, env_flag


@pytest.mark.parametrize("text", ["1", "true", "TRUE", "yes", "Y", "y", "on", " On "])
def test_yes(text: str) -> None:
    assert env_flag({"PSYCH_X": text}, "PSYCH_X") is True


@pytest.mark.parametrize("text", ["0", "false", "False", "no", "N", "n", "off", " OFF "])
def test_no(text: str) -> None:
    assert env_flag({"PSYCH_X": text}, "PSYCH_X", default=True) is False


@pytest.mark.parametrize("environ", [{}, {"PSYCH_X": ""}, {"PSYCH_X": "  "}])
def test_unset_or_blank_is_the_default(environ: dict[str, str]) -> None:
    assert env_flag(environ, "PSYCH_X") is False
    assert env_flag(environ, "PSYCH_X", default=True) is True
    assert env_flag(environ, "PSYCH_X", None) is None


@pytest.mark.parametrize("text", ["maybe", "2", "yess", "tru e"])
def test_anything_else_is_refused_naming_the_variable_and_value(text: str) -> None:
    with pytest.raises(SpecError) as refused:
        env_flag({"PSYCH_X": text}, "PSYCH_X")
    assert f"PSYCH_X={text!r} is neither yes nor no" in str(refused.value)
