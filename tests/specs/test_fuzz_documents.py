"""Fuzzing Spec documents: whatever the bytes, only a SpecError comes out, and soon.

Documents are valid Specs mutated (fragments known to hurt parsers spliced in, spans cut
or repeated, bytes flipped), random JSON-like structures written as JSON and as YAML, and
the hostile cases of test_documents.py. Each is read as JSON and as YAML; what loads is
validated, and what validates is hashed and read back as a Version. The budget is
bounded (``max_examples``, ``deadline``) so the test stays a few seconds in CI.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psych_runtime.specs import (
    AgentBuilder,
    SpecError,
    Version,
    WorkflowBuilder,
    spec_from_json,
    spec_from_yaml,
    spec_to_json,
    spec_to_yaml,
    validate,
)

from .test_documents import BILLION_LAUGHS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PER_DOCUMENT_SECONDS = 2.0
"""CPU seconds one document may take to load, validate, hash and read back (CPU time, not
wall time, so other work on a shared CI machine does not make the bound flaky)."""

FUZZ = settings(
    max_examples=150,
    deadline=timedelta(seconds=6),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _seeds() -> list[str]:
    agent = (
        AgentBuilder("support")
        .model("gpt-4o", temperature=0.2, fallbacks=["gpt-4o-mini"])
        .instructions("Help.")
        .http_tool("refund", description="Refund.", url="https://x.test/{order_id}")
        .skill("policy", "When to refund.", body="Only delivered orders. [[skill:policy]]")
        .limits(max_steps=10)
        .build()
    )
    workflow = WorkflowBuilder("w").agent_step("a", agent).build()
    texts = [path.read_text() for path in sorted(EXAMPLES.glob("*.yaml"))]
    for spec in (agent, workflow):
        texts += [spec_to_json(spec), spec_to_yaml(spec)]
    return texts


SEEDS = _seeds()

NASTY_FRAGMENTS = [
    "[" * 3000,
    "{" * 3000,
    "- " * 500,
    "&a ",
    "*a",
    "&a [*a]",
    "<<: *a",
    "!!binary ",
    "!!python/object:os.system ",
    "!!timestamp 2001-13-45",
    "\\ud800",
    '"\\ud83d"',
    "\x00",
    "\t",
    "9" * 5000,
    "0x" + "f" * 3000,
    "1e99999",
    "NaN",
    "name: dup\nname: dup\n",
    '"name": 1, "name": 2, ',
    ": ",
    "\n",
    "---\n",
    "'",
    '"',
    "\\",
    "\ufeff",
    "\u2028",
]

HOSTILE = [
    BILLION_LAUGHS,
    "kind: agent\nname: a\nmodel: {model: m}\n" + BILLION_LAUGHS.replace("a:", "za:", 1),
    "&a {x: *a}",
    "[" * 100_000,
    '{"a":' * 50_000,
    '{"kind": "agent", "name": "a", "name": "b", "model": {"model": "m"}}',
]


@st.composite
def mutated(draw: st.DrawFn) -> str | bytes:
    text = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        action = draw(st.sampled_from(["insert", "cut", "repeat", "char"]))
        if action == "insert":
            text = text[:at] + draw(st.sampled_from(NASTY_FRAGMENTS)) + text[at:]
        elif action == "cut":
            text = text[:at] + text[at + draw(st.integers(1, 40)) :]
        elif action == "repeat":
            span = text[at : at + draw(st.integers(1, 60))]
            text = text[:at] + span * draw(st.integers(2, 5)) + text[at:]
        else:
            text = text[:at] + draw(st.characters()) + text[at + 1 :]
    if draw(st.booleans()):
        return text
    data = bytearray(text.encode("utf-8", "surrogatepass"))
    if data and draw(st.booleans()):
        data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0x80, 0xFF))
    return bytes(data)


FIELD_NAMES = ["kind", "name", "model", "tools", "steps", "spec", "input_schema", "limits"]
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=10**4000, max_value=10**4200)
    | st.floats()
    | st.text(max_size=20)
    | st.sampled_from(["agent", "workflow", "http", "code", "\ud800", "x\udfff"])
)
STRUCTURES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(FIELD_NAMES) | st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=30,
)


@st.composite
def structured(draw: st.DrawFn) -> str:
    data: Any = draw(STRUCTURES)
    if draw(st.booleans()):
        data = {"kind": draw(st.sampled_from(["agent", "workflow"])), "name": "n", "x": data}
    if draw(st.booleans()):
        try:
            return yaml.safe_dump(data, allow_unicode=draw(st.booleans()))
        except (yaml.YAMLError, ValueError, UnicodeError):
            pass  # PyYAML cannot write every value (a huge int, a surrogate); JSON can
    return json.dumps(data, ensure_ascii=draw(st.booleans()))


DOCUMENTS = mutated() | structured() | st.sampled_from(HOSTILE)


def survive(document: str | bytes) -> None:
    """Read ``document`` both ways; only SpecError may come out, each within the bound.

    What loads is validated, hashed and read back as a Version whatever validate says
    (an unregistered code tool does not make a document any less worth hashing).
    """
    for load in (spec_from_json, spec_from_yaml):
        started = time.process_time()
        refusal = ""
        try:
            spec = load(document, source="fuzz")
            assert isinstance(validate(spec), list)
            version = Version.of(spec)
            assert Version.from_json(version.to_json()) == version
            assert Version.from_yaml(version.to_yaml()) == version
        except SpecError as err:
            refusal = str(err)
            assert refusal, "a refusal says what is wrong"
            refusal.encode("utf-8")  # and can be printed (no lone surrogate in it)
        elapsed = time.process_time() - started
        assert elapsed < PER_DOCUMENT_SECONDS, f"{load.__name__} took {elapsed:.2f}s {refusal}"


@FUZZ
@given(DOCUMENTS)
def test_only_spec_errors_come_out_of_any_document(document: str | bytes) -> None:
    survive(document)


def test_every_seed_document_is_a_valid_spec() -> None:
    # The mutations start from valid documents, or they would only fuzz the first error.
    for text in SEEDS:
        problems = validate(spec_from_yaml(text))
        assert all("is not registered" in p.message for p in problems), problems
