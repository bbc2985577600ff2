"""Redactor.scrub on details beyond dicts, lists and tuples, and the exact depth bound."""

from __future__ import annotations

import dataclasses
import enum
import re
import warnings
from array import array
from collections import OrderedDict, UserList, UserString, deque
from pathlib import PurePosixPath
from typing import Any

import pydantic_core
import pytest
from pydantic import (
    AnyUrl,
    BaseModel,
    ConfigDict,
    Field,
    PostgresDsn,
    TypeAdapter,
    computed_field,
    field_serializer,
)
from pydantic.dataclasses import dataclass as pydantic_dataclass
from temporalio.api.failure.v1 import Failure
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, DefaultFailureConverter
from temporalio.exceptions import ApplicationError

from psych_runtime.activities.secrets import Redactor, StaticSecretResolver, resolve_secret
from psych_runtime.activities.secrets._details import _TOO_DEEP, MAX_DETAIL_DEPTH
from psych_runtime.specs import Scope

CONVERTERS = [
    pytest.param(pydantic_data_converter, id="pydantic"),  # the worker's (PsychPlugin)
    pytest.param(DataConverter.default, id="default-json"),
]


def sent(err: ApplicationError, converter: DataConverter) -> bytes:
    """What the failure converter sends for ``err``."""
    failure = Failure()
    with warnings.catch_warnings():  # the default converter warns on a pydantic model
        warnings.simplefilter("ignore")
        DefaultFailureConverter().to_failure(err, converter.payload_converter, failure)
    return failure.SerializeToString()


@dataclasses.dataclass(frozen=True)
class Echo:
    said: str
    parts: tuple[str, ...] = ()


@dataclasses.dataclass(slots=True)
class Page:
    lines: list[Any]
    status: int = 200


class Key(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str = Field(alias="Name")


class Body(BaseModel):
    text: str
    tags: set[str]
    raw: bytes = b""

    @field_serializer("raw")
    def _raw(self, raw: bytes) -> str:
        return f"raw: {raw.decode()}"  # what is sent is not the field itself


class Broken(BaseModel):
    text: str

    @field_serializer("text")
    def _text(self, text: str) -> str:
        raise ValueError(f"cannot serialise {text}")


@pytest.mark.parametrize("converter", CONVERTERS)
def test_scrub_walks_sets_dataclasses_and_pydantic_models(converter: DataConverter) -> None:
    # Until 12-07 a secret in a set, a frozenset, a dataclass or a pydantic model left in
    # the failure as it was (only dicts, lists and tuples were walked).
    fine_body = Body(text="ok", tags={"x"})
    fine_echo = Echo("ok")
    err = ApplicationError(
        "failed",
        {"alpha-1", "ok"},
        frozenset({("alpha-1", 1)}),
        Echo("said alpha-1", ("alpha-1",)),
        Page([Echo("alpha-1"), fine_echo]),
        Body(text="said alpha-1", tags={"alpha-1"}, raw=b"alpha-1"),
        {Key(Name="alpha-1")},
        {Key(Name="alpha-1"): 1, ("alpha-1", Key(Name="alpha-1")): 2},
        Broken(text="alpha-1"),
        [fine_body, fine_echo],
        type="Boom",
    )
    Redactor({"a": "alpha-1"}).scrub(err)

    words, pairs, echo, page, body, keys, keyed, broken, kept = err.details
    assert words == {"[REDACTED:a]", "ok"}
    assert type(pairs) is frozenset and pairs == {("[REDACTED:a]", 1)}
    assert echo == Echo("said [REDACTED:a]", ("[REDACTED:a]",))  # a frozen one too
    assert type(page) is Page and page.lines == [Echo("[REDACTED:a]"), fine_echo]
    assert page.lines[1] is fine_echo
    # A model: what pydantic's converter sends for it (its serializer ran), redacted.
    assert body == {
        "text": "said [REDACTED:a]",
        "tags": ["[REDACTED:a]"],
        "raw": "raw: [REDACTED:a]",
    }
    assert keys == [{"Name": "[REDACTED:a]"}]  # a model's dump is no set item: a list
    assert keyed == {
        "name='[REDACTED:a]'": 1,  # as pydantic's converter writes a model key: its text
        "('[REDACTED:a]', Key(name='[REDACTED:a]'))": 2,
    }
    assert broken == "[UNENCODABLE:Broken]"
    assert kept[0] is fine_body and kept[1] is fine_echo  # no secret: the very objects
    assert b"alpha-1" not in sent(err, converter)


def test_scrub_leaves_details_without_a_secret_as_they_are() -> None:
    details = ({"ok"}, frozenset({"ok"}), Echo("ok"), Body(text="ok", tags={"ok"}))
    err = ApplicationError("failed", *details)
    Redactor({"a": "alpha-1"}).scrub(err)
    assert all(walked is given for walked, given in zip(err.details, details, strict=True))


def depth_of(value: Any) -> int:
    """How deep containers nest in ``value`` (a container itself is at depth 1)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            stack.extend((child, depth + 1) for child in node.values())
        elif isinstance(node, list | tuple):
            stack.extend((child, depth + 1) for child in node)
        else:
            continue
        deepest = max(deepest, depth)
    return deepest


def chain_of(levels: int, bottom: Any) -> Any:
    value = bottom
    for _ in range(levels - 1):
        value = [value]
    return value


def test_scrub_bounds_a_shared_container_wherever_it_is_met() -> None:
    # Until 12-07 a container met twice was walked at the depth met first only: shared at
    # depth 1 and again at depth 80, what was under it reached depth 139 at the second place.
    shared = chain_of(60, ["said alpha-1"])
    deep_place = chain_of(80, shared)
    err = ApplicationError("failed", deep_place, shared)  # the shallow place walked first
    Redactor({"a": "alpha-1"}).scrub(err)

    walked_deep, walked_shallow = err.details
    assert depth_of(walked_deep) == MAX_DETAIL_DEPTH
    # One object wherever it is met, so cut where the deeper place needs it cut.
    inner = walked_deep
    for _ in range(79):
        inner = inner[0]
    assert inner is walked_shallow
    assert depth_of(walked_shallow) == MAX_DETAIL_DEPTH - 79
    assert walked_shallow == chain_of(MAX_DETAIL_DEPTH - 78, _TOO_DEEP)
    assert b"alpha-1" not in sent(err, DataConverter.default)


def test_scrub_keeps_a_shared_container_that_fits_everywhere() -> None:
    # The bound is exact, not stricter: nesting to MAX_DETAIL_DEPTH at the deepest place
    # is kept whole, the secret at the bottom redacted.
    shared = chain_of(21, "alpha-1")  # 20 lists
    err = ApplicationError("failed", shared, chain_of(MAX_DETAIL_DEPTH - 19, shared))
    Redactor({"a": "alpha-1"}).scrub(err)
    walked_shallow, walked_deep = err.details
    assert depth_of(walked_deep) == MAX_DETAIL_DEPTH
    assert walked_shallow == chain_of(21, "[REDACTED:a]")
    assert b"alpha-1" not in sent(err, DataConverter.default)


def test_scrub_keeps_what_is_met_deep_only_under_a_container_cut() -> None:
    # Until 12-07 a container under one cut (met deeper than the bound somewhere) was cut
    # everywhere too, even where it is met shallow: a detail 10 lists deep became _TOO_DEEP.
    # What is under a cut container is not met through it, so it counts for no depth.
    below = chain_of(10, "said alpha-1")
    cut = [below]
    err = ApplicationError("failed", below, cut, chain_of(MAX_DETAIL_DEPTH + 1, cut))
    Redactor({"a": "alpha-1"}).scrub(err)
    walked_below, walked_cut, walked_deep = err.details
    assert walked_cut == _TOO_DEEP
    assert walked_below == chain_of(10, "said [REDACTED:a]")
    assert depth_of(walked_deep) == MAX_DETAIL_DEPTH
    assert b"alpha-1" not in sent(err, DataConverter.default)


def test_scrub_walks_what_was_met_first_too_deep_under_a_container_cut() -> None:
    # The walk met ``inner`` first at the bound, through ``cut`` (99 lists down one way,
    # 101 another, so cut everywhere), and so never went into what ``inner`` holds; met
    # again 2 deep, it was not walked again, and what it holds was cut as too deep there.
    leaf = ["said alpha-1"]
    inner = [leaf]
    cut = [inner]
    err = ApplicationError(
        "failed",
        [inner],
        chain_of(MAX_DETAIL_DEPTH + 1, cut),
        chain_of(MAX_DETAIL_DEPTH - 1, cut),  # walked first
    )
    Redactor({"a": "alpha-1"}).scrub(err)
    wrapped = err.details[0]
    assert wrapped == [[["said [REDACTED:a]"]]]
    assert b"alpha-1" not in sent(err, DataConverter.default)


@pydantic_dataclass
class Reply:
    status: int
    token: dataclasses.InitVar[str] = ""

    def __post_init__(self, token: str) -> None:
        self._token = token

    @computed_field  # type: ignore[prop-decorator]
    @property
    def sent_with(self) -> str:
        return f"Bearer {self._token}"


@pytest.mark.parametrize("converter", CONVERTERS)
def test_scrub_sends_a_pydantic_dataclass_as_its_serializer_does(
    converter: DataConverter,
) -> None:
    # Until 12-07 a pydantic dataclass was copied with its fields redacted, as a standard
    # one, and pydantic's converter sent what its serializer made of the copy: a computed
    # field reading the unredacted state besides the fields.
    fine = Reply(200, "ok")
    err = ApplicationError("failed", Reply(401, "alpha-1"), fine, type="Boom")
    Redactor({"a": "alpha-1"}).scrub(err)
    reply, kept = err.details
    assert reply == {"status": 401, "sent_with": "Bearer [REDACTED:a]"}
    assert kept is fine
    assert b"alpha-1" not in sent(err, pydantic_data_converter)


class Tidy(BaseModel):
    text: str

    def model_dump(self) -> dict[str, Any]:  # type: ignore[override]
        return {"tidy": True}  # pydantic's converter never calls it


def test_scrub_dumps_a_model_as_pydantic_sends_it_whatever_its_model_dump() -> None:
    # Until 12-07 a model was dumped through its own model_dump: one its class overrides
    # (here without the keywords) became [UNENCODABLE:Tidy], secret or not, although
    # pydantic's converter (its class's serializer) sends it. (The SDK's default JSON
    # converter calls model_dump with keywords: it cannot send Tidy at all.)
    fine = Tidy(text="ok")
    err = ApplicationError("failed", Tidy(text="said alpha-1"), fine, type="Boom")
    Redactor({"a": "alpha-1"}).scrub(err)
    tidy, kept = err.details
    assert tidy == {"text": "said [REDACTED:a]"}
    assert kept is fine
    assert b"alpha-1" not in sent(err, pydantic_data_converter)


@pytest.mark.parametrize("converter", CONVERTERS)
def test_scrub_walks_a_deque(converter: DataConverter) -> None:
    # Until 12-07 a deque (the last lines of a server's output, say) was left as it was,
    # and both converters send one as a list of its items: the secret went out.
    fine = deque(["ok"])
    tail = deque(["line 1", "said alpha-1", {"key": "alpha-1"}], maxlen=3)
    err = ApplicationError("failed", tail, fine, [tail], type="Boom")
    Redactor({"a": "alpha-1"}).scrub(err)
    walked, kept, (again,) = err.details
    assert type(walked) is deque and walked.maxlen == 3
    assert list(walked) == ["line 1", "said [REDACTED:a]", {"key": "[REDACTED:a]"}]
    assert again is walked
    assert kept is fine
    assert b"alpha-1" not in sent(err, converter)


class Status(enum.Enum):
    DENIED = "denied for alpha-1"
    PAIR = ("pair", "alpha-1")
    FINE = "ok"


def sent_clean(err: ApplicationError, converter: DataConverter) -> None:
    """Nothing ``err`` sends holds ``alpha-1``: as text, nor as the JSON list of its bytes
    or of its characters (how the default JSON converter sends a ``bytearray``, a
    ``memoryview`` or an ``array``)."""
    payload = sent(err, converter)
    assert b"alpha-1" not in payload
    assert ",".join(str(byte) for byte in b"alpha-1").encode() not in payload
    assert ",".join(f'"{char}"' for char in "alpha-1").encode() not in payload


@pytest.mark.parametrize("converter", CONVERTERS)
def test_scrub_walks_enum_members_and_bytearrays(converter: DataConverter) -> None:
    # Until 12-07 an Enum member (pydantic's converter sends its value), a bytearray, a
    # memoryview and an array of bytes or characters (pydantic's sends a bytearray as
    # text, the default JSON one each as the list of its bytes or characters) were left
    # as they were: a secret in them went out.
    fine = bytearray(b"ok")
    err = ApplicationError(
        "failed",
        Status.DENIED,
        {Status.PAIR: [Status.FINE]},
        bytearray(b"said alpha-1"),
        memoryview(b"said alpha-1"),
        array("b", b"said alpha-1 \xff"),
        array("u", "said alpha-1"),
        UserString("said alpha-1"),  # neither converter sends one: its text, once redacted
        fine,
        type="Boom",
    )
    Redactor({"a": "alpha-1"}).scrub(err)
    denied, keyed, blob, view, signed, chars, user, kept = err.details
    assert denied == "denied for [REDACTED:a]"  # its value, redacted
    # As a key, which pydantic's converter writes as its value: its value, redacted.
    assert keyed == {("pair", "[REDACTED:a]"): [Status.FINE]}
    assert keyed[("pair", "[REDACTED:a]")][0] is Status.FINE  # no secret: the member
    assert type(blob) is bytearray and blob == b"said [REDACTED:a]"
    assert type(view) is memoryview and view.tobytes() == b"said [REDACTED:a]"
    assert signed == array("b", b"said [REDACTED:a] \xff")
    assert chars == array("u", "said [REDACTED:a]")
    assert user == "said [REDACTED:a]"
    assert kept is fine
    if converter is pydantic_data_converter:  # it cannot send a memoryview or an array
        err = ApplicationError("failed", denied, keyed, blob, user, type="Boom")
    else:  # nor this one a key that is no text
        err = ApplicationError("failed", denied, blob, view, signed, chars, user, type="Boom")
    sent_clean(err, converter)


def test_scrub_sends_urls_with_credentials_as_their_text_redacted() -> None:
    # Until 12-07 a pydantic URL (AnyUrl, a DSN, pydantic_core's Url), which pydantic's
    # converter sends as its text, was left as it was: a password or a token in it too.
    url = TypeAdapter(AnyUrl).validate_python("https://user:alpha-1@host/p?token=alpha-1")
    dsn = TypeAdapter(PostgresDsn).validate_python("postgres://u:alpha-1@h1,h2/db")
    fine = TypeAdapter(AnyUrl).validate_python("https://host/p")
    err = ApplicationError(
        "failed",
        url,
        {url: dsn},
        pydantic_core.Url("https://host/?key=alpha-1"),
        re.compile("key=alpha-1"),
        PurePosixPath("/keys/alpha-1"),
        fine,
        type="Boom",
    )
    Redactor({"a": "alpha-1"}).scrub(err)
    text, keyed, core, pattern, path, kept = err.details
    assert text == "https://user:[REDACTED:a]@host/p?token=[REDACTED:a]"
    assert keyed == {text: "postgres://u:[REDACTED:a]@h1,h2/db"}
    assert core == "https://host/?key=[REDACTED:a]"
    assert pattern == "key=[REDACTED:a]"
    assert path == "/keys/[REDACTED:a]"
    assert kept is fine
    sent_clean(err, pydantic_data_converter)


@pytest.mark.parametrize("converter", CONVERTERS)
def test_scrub_walks_dict_views_and_other_iterables(converter: DataConverter) -> None:
    # Until 12-07 a dict's keys(), values() or items(), a generator or any other iterable
    # (the default JSON converter sends each as a list of its items; pydantic's an
    # iterator) was left as it was, and a secret in it went out.
    headers = {"Authorization": "Bearer alpha-1", "alpha-1": "ok"}
    fine = {"ok": "ok"}.values()
    err = ApplicationError(
        "failed",
        headers.keys(),
        headers.values(),
        headers.items(),
        (line for line in ["said alpha-1"]),
        iter(["ok"]),
        UserList(["said alpha-1"]),
        fine,
        type="Boom",
    )
    Redactor({"a": "alpha-1"}).scrub(err)
    keys, values, items, lines, used, user, kept = err.details
    assert keys == ["Authorization", "[REDACTED:a]"]
    assert values == ["Bearer [REDACTED:a]", "ok"]
    assert items == [("Authorization", "Bearer [REDACTED:a]"), ("[REDACTED:a]", "ok")]
    assert lines == ["said [REDACTED:a]"]
    assert used == ["ok"]  # an iterator is used up by reading it: its items, secret or not
    assert user == ["said [REDACTED:a]"]
    assert kept is fine
    if converter is pydantic_data_converter:  # it cannot send a kept dict view at all
        err = ApplicationError("failed", *err.details[:-1], type="Boom")
    sent_clean(err, converter)


class Grant:
    """Not a model, but with a callable ``dict`` (as pydantic v1's models, and classes made
    to look like them): the SDK's default JSON converter sends what it makes."""

    def __init__(self, token: str) -> None:
        self.token = token

    def dict(self) -> dict[str, Any]:
        return {"token": self.token, "scopes": [Scoped(self.token)]}


class Scoped:
    def __init__(self, token: str) -> None:
        self.token = token

    def dict(self) -> str:  # another with a dict(): read as any value, as the encoder does
        return f"read for {self.token}"


class Refusing:
    def dict(self) -> dict[str, Any]:
        # What the encoder raises becomes the failure's message ("Failed building
        # exception result: ..."): it must never run in the failure sent.
        raise ValueError("no dict for alpha-1")


class Looping:
    def dict(self) -> Looping:
        return Looping()  # without end: no encoder can send it


@pytest.mark.parametrize("converter", CONVERTERS)
async def test_scrub_walks_what_a_dict_method_makes(converter: DataConverter) -> None:
    # Until 12-07 an object with a callable dict() was left as it was: the default JSON
    # converter sent what its dict() made, the secret in it (and one whose dict() raised
    # failed the encoding, its message quoting the secret). Pydantic's cannot send one.
    secret = await resolve_secret(
        StaticSecretResolver({"api_key": "alpha-1"}), Scope(tenant="acme"), "api_key"
    )
    fine = Grant("ok")
    err = ApplicationError(
        "failed",
        Grant(secret),
        [Refusing()],
        {"grant": Grant(secret)},
        Looping(),
        fine,
        type="Boom",
    )
    Redactor({"api_key": secret}).scrub(err)
    grant, refusing, keyed, looping, kept = err.details
    made = {"token": "[REDACTED:api_key]", "scopes": ["read for [REDACTED:api_key]"]}
    assert grant == made
    assert refusing == ["[UNENCODABLE:Refusing]"]  # as an iterable whose reading raises
    assert keyed == {"grant": made}
    assert looping == "[UNENCODABLE:Looping]"
    assert kept is fine  # no secret in what it makes: the very object
    if converter is pydantic_data_converter:  # it cannot send a kept one at all
        err = ApplicationError("failed", *err.details[:-1], type="Boom")
    sent_clean(err, converter)


@pytest.mark.parametrize("converter", CONVERTERS)
def test_scrub_rebuilds_an_ordered_dict_with_redacted_keys(converter: DataConverter) -> None:
    # Until 12-07 an OrderedDict was refilled through dict's own methods, which left its
    # order holding the old keys: encoding it raised KeyError('alpha-1'), a message the
    # worker sends as the failure's ("Failed building exception result: 'alpha-1'").
    ordered = OrderedDict([("alpha-1", "said alpha-1"), ("b", "fine"), ("c", {"alpha-1": 1})])
    err = ApplicationError("failed", ordered, type="Boom")
    Redactor({"a": "alpha-1"}).scrub(err)
    (walked,) = err.details
    assert type(walked) is OrderedDict
    assert list(walked.items()) == [
        ("[REDACTED:a]", "said [REDACTED:a]"),
        ("b", "fine"),
        ("c", {"[REDACTED:a]": 1}),
    ]
    walked.move_to_end("b")  # its order is whole: every key in it is in the dict
    assert list(walked) == ["[REDACTED:a]", "c", "b"]
    sent_clean(err, converter)


@pytest.mark.parametrize("converter", CONVERTERS)
def test_scrub_rebuilds_an_ordered_dict_in_its_own_order(converter: DataConverter) -> None:
    # An OrderedDict reordered by move_to_end was rebuilt in the order its keys were
    # first set (dict's own items), not its own, which pydantic's converter sends: the
    # failure went out with its keys in another order than the Run's.
    ordered = OrderedDict([("a0", "said alpha-1"), ("b", "fine"), ("c", {"alpha-1": 1})])
    ordered.move_to_end("a0")
    ordered.move_to_end("c", last=False)
    err = ApplicationError("failed", ordered, type="Boom")
    Redactor({"a": "alpha-1"}).scrub(err)
    (walked,) = err.details
    assert type(walked) is OrderedDict
    assert list(walked.items()) == [
        ("c", {"[REDACTED:a]": 1}),
        ("b", "fine"),
        ("a0", "said [REDACTED:a]"),
    ]
    clean = OrderedDict([("c", {"[REDACTED:a]": 1}), ("b", "fine"), ("a0", "said [REDACTED:a]")])
    assert sent(err, converter) == sent(ApplicationError("failed", clean, type="Boom"), converter)
    sent_clean(err, converter)


class Carrier:
    """An object given its ``dict`` as an attribute of its own, not of its class."""

    def __init__(self, **attributes: Any) -> None:
        self.__dict__.update(attributes)


@pytest.mark.parametrize("converter", CONVERTERS)
def test_scrub_walks_what_a_dict_of_the_object_itself_makes(converter: DataConverter) -> None:
    # The default JSON converter calls a callable ``dict`` it finds on the object, set on
    # the instance as well as on its class; the walk looked at the class alone, so what
    # such an instance's dict() made went out with the secret in it.
    plain = Carrier(note="no dict of its own")  # met first: its class has no dict()
    carrier = Carrier(dict=lambda: {"token": "alpha-1", "fine": "ok"})
    err = ApplicationError("failed", {"kept": plain}, carrier, type="Boom")
    Redactor({"a": "alpha-1"}).scrub(err)
    keyed, walked = err.details
    assert keyed["kept"] is plain  # no dict of its own: left as it is
    assert walked == {"token": "[REDACTED:a]", "fine": "ok"}
    # Neither converter can send the plain one at all: the rest as the worker sends it.
    sent_clean(ApplicationError("failed", *err.details[1:], type="Boom"), converter)
