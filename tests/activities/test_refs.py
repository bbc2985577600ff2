"""The compact wire form of a blob ref (``activities/contract/_refs.py``)."""

from __future__ import annotations

import hashlib

import pytest
from pydantic import BaseModel, ValidationError

from psych_runtime.activities.contract import WireRef, from_wire, to_wire


def ref(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


class Holder(BaseModel):
    ref: WireRef
    refs: tuple[WireRef, ...] = ()


def test_a_ref_travels_as_44_characters_and_reads_back_to_the_same_value() -> None:
    value = ref("hello")
    compact = to_wire(value)
    assert compact.startswith("~") and len(compact) == 44 and len(value) == 71
    assert from_wire(compact) == value
    # The full form (older writers, hand-written payloads) is still read.
    assert from_wire(value) == value


def test_a_wire_ref_is_the_full_form_in_python_and_compact_in_json() -> None:
    holder = Holder(ref=ref("a"), refs=(ref("b"),))
    assert holder.ref == ref("a") and holder.model_dump()["refs"] == (ref("b"),)
    assert holder.model_dump_json() == (
        f'{{"ref":"{to_wire(ref("a"))}","refs":["{to_wire(ref("b"))}"]}}'
    )
    assert Holder.model_validate_json(holder.model_dump_json()) == holder


def test_a_malformed_ref_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="not a blob ref"):
        to_wire("sha256:ABC")
    with pytest.raises(ValueError, match="not a compact blob ref"):
        from_wire("~tooshort")
    with pytest.raises(ValidationError, match="compact blob ref"):
        Holder.model_validate({"ref": "~x"})
    with pytest.raises(ValidationError, match="pattern"):
        Holder.model_validate({"ref": "md5:abc"})
