"""The compact wire form of a blob ref (``activities/contract/_refs.py``)."""

from __future__ import annotations

import hashlib
import string

import pytest
from pydantic import BaseModel, ValidationError

from psych_runtime.activities.contract import WireRef, _refs, from_wire, to_wire


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
    # Exactly 43 characters: a trailing newline is not a ref either.
    with pytest.raises(ValueError, match="not a compact blob ref"):
        from_wire(to_wire(ref("nl")) + "\n")


def test_a_ref_read_in_another_spelling_is_still_written_in_the_canonical_one() -> None:
    value = ref("spelling")
    canonical = to_wire(value)
    # The last character carries two bits the digest does not use (0 when written): with
    # one of them set it reads to the same ref. Read first, it must not become what is
    # written.
    alphabet = string.ascii_uppercase + string.ascii_lowercase + string.digits + "-_"
    other = canonical[:-1] + alphabet[alphabet.index(canonical[-1]) | 1]
    assert other != canonical
    _refs._WIRE_OF.clear()
    _refs._REF_OF.clear()
    assert from_wire(other) == value
    assert to_wire(value) == canonical
    assert from_wire(canonical) == value


def test_the_tables_of_converted_refs_stay_bounded() -> None:
    for n in range(_refs._KNOWN_MOST + 10):
        assert from_wire(to_wire(ref(str(n)))) == ref(str(n))
    assert len(_refs._WIRE_OF) <= _refs._KNOWN_MOST
    assert len(_refs._REF_OF) <= _refs._KNOWN_MOST
