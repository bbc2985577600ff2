"""The one redaction function every activity passes upstream-derived text through."""

from __future__ import annotations

import base64
import json
from urllib.parse import quote

import pytest
from pydantic import BaseModel, ValidationError

from psych_runtime.activities.secrets import Redactor
from psych_runtime.activities.secrets._redact import RedactedError

SECRET = 'tok/en+"with"<odd>&chars='


@pytest.mark.parametrize(
    "form",
    [
        SECRET,
        f"Bearer {SECRET}",
        quote(SECRET, safe=""),
        json.dumps(SECRET)[1:-1],
        json.dumps(SECRET)[1:-1].replace("/", "\\/"),  # PHP's json_encode
        'tok/en+\\"with\\"\\u003codd\\u003e\\u0026chars=',  # Go's encoding/json
        "tok/en+&quot;with&quot;&lt;odd&gt;&amp;chars=",
        base64.b64encode(SECRET.encode()).decode(),
        base64.urlsafe_b64encode(SECRET.encode()).decode().rstrip("="),
    ],
)
def test_each_echoed_form_is_replaced_by_the_name(form: str) -> None:
    redact = Redactor({"api": SECRET})
    assert redact(f"you sent <{form}>") == (
        f"you sent <{'Bearer ' if form.startswith('Bearer') else ''}[REDACTED:api]>"
    )


def test_several_secrets_and_no_secret() -> None:
    redact = Redactor({"a": "alpha-1", "b": "beta-2", "empty": ""})
    assert redact("alpha-1 beta-2 gamma") == "[REDACTED:a] [REDACTED:b] gamma"
    assert Redactor()("alpha-1") == "alpha-1"
    assert "alpha" not in repr(redact) and "'a'" in repr(redact)


def test_scrub_rewrites_the_cause_chain_and_replaces_what_cannot_be_rewritten() -> None:
    class Body(BaseModel):
        n: int

    try:
        Body.model_validate_json('{"n": "alpha-1"}')
    except ValidationError as err:
        validation = err
    try:
        raise ValueError("parse failed near alpha-1") from validation
    except ValueError as err:
        outer = err

    clean = Redactor({"a": "alpha-1"}).scrub(outer)

    assert clean is outer and str(outer) == "parse failed near [REDACTED:a]"
    assert isinstance(outer.__cause__, RedactedError)  # ValidationError computes its text
    assert "alpha-1" not in str(outer.__cause__)
    assert "[REDACTED:a]" in str(outer.__cause__)
