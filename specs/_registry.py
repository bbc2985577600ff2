"""The ToolRegistry: Python functions a worker can call as code tools.

A Spec names a code tool; the registry holds the function. The JSON schema the model sees
is derived here, once, from the function's type hints and its Google-style docstring (the
summary becomes the description, ``Args:`` entries become parameter descriptions), so the
schema cannot drift from the code. Arguments are validated against a pydantic model with
``extra="forbid"`` before the function runs.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import re
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, Field, create_model

from psych_runtime.specs._errors import PsychError, RegistryError
from psych_runtime.specs._models import NAME_PATTERN, Scope
from psych_runtime.specs._validation import RESERVED_TOOL_NAMES

_NAME = re.compile(NAME_PATTERN)
_F = TypeVar("_F", bound=Callable[..., Any])
_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$")
_SECTION_HEADER = re.compile(r"^\s*[A-Z][A-Za-z ]*:\s*$")
_ARG_LINE = re.compile(r"^\s*(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")


_TOOL_SCOPE: ContextVar[Scope | None] = ContextVar("psych_tool_scope", default=None)


def tool_scope() -> Scope:
    """The Scope of the Run whose code tool call is running: its tenant, principal and
    labels, so that one registered function acts for the right tenant.

    A worker sets it for every code tool call (a sync tool's thread, an async tool and a
    local tool alike); ``tool_call_scope`` sets it for a test that calls a tool directly.

    Raises:
        PsychError: called outside a code tool's call.
    """
    scope = _TOOL_SCOPE.get()
    if scope is None:
        raise PsychError(
            "tool_scope() answers only inside a code tool's call (a worker running it, or "
            "a `with tool_call_scope(scope):` block)"
        )
    return scope


@contextlib.contextmanager
def tool_call_scope(scope: Scope) -> Iterator[Scope]:
    """Within the block, ``tool_scope()`` answers ``scope``: how a worker runs each code
    tool call, and how a test calls a tool as one of ``scope``'s Runs would."""
    token = _TOOL_SCOPE.set(scope)
    try:
        yield scope
    finally:
        _TOOL_SCOPE.reset(token)


@dataclass(frozen=True)
class ExternalWait:
    """Return this from a code tool to wait for an external completion.

    The Run suspends (reason ``external``) until someone completes ``token`` with a payload
    (``PsychClient.complete``, the ``psych.resume`` update or signal), which becomes the
    tool's result; or until ``SuspensionPolicy.external_expires_seconds`` pass, when the
    Run settles ABANDONED. The tool hands ``token`` to whoever will call back (a webhook
    registration, a ticket), so it chooses it.

    Attributes:
        token: identifies the wait; unique within the Run.
        message: what the wait is for, shown in the Run's state and records.
    """

    token: str
    message: str = ""


@dataclass(frozen=True)
class ToolDef:
    """One registered code tool.

    Attributes:
        name: the name a Spec's CodeTool refers to.
        description: what the model is told the tool does.
        arguments: the pydantic model the call's arguments are validated against.
        fn: the function (sync or async).
        idempotent: whether running it twice is harmless; if False a call interrupted by a
            crash is recorded UNKNOWN instead of being run again.
        read_only: MCP-style annotation for policies; None = unannotated (treated as write).
        destructive: MCP-style annotation for policies; None = unannotated.
        local_seconds: set for a quick tool safe to repeat: its calls run as local
            activities, where the Run's workflow task runs, each attempt given this many
            seconds (``LOCAL_SECONDS_MIN`` to ``LOCAL_SECONDS_MAX``); None = a normal
            activity.
    """

    name: str
    description: str
    arguments: type[BaseModel]
    fn: Callable[..., Any]
    idempotent: bool
    unpack: bool
    read_only: bool | None = None
    destructive: bool | None = None
    local_seconds: float | None = None

    @property
    def is_async(self) -> bool:
        """Whether ``fn`` is a coroutine function."""
        return inspect.iscoroutinefunction(self.fn)

    @property
    def parameters_schema(self) -> dict[str, Any]:
        """The JSON schema of the arguments, as shown to the model (a copy: the caller's)."""
        return copy.deepcopy(self._schema)

    @functools.cached_property
    def _schema(self) -> dict[str, Any]:
        # Made once per tool: pydantic builds a schema generator per call (~7 ms), and the
        # catalog reads it at the start of every Run.
        schema = self.arguments.model_json_schema()
        schema.pop("title", None)
        return schema

    def bind(self, parsed: BaseModel) -> Callable[[], Any]:
        """``fn`` bound to validated arguments (unpacked as keywords, or the model itself)."""
        if self.unpack:
            kwargs = {name: getattr(parsed, name) for name in type(parsed).model_fields}
            return functools.partial(self.fn, **kwargs)
        return functools.partial(self.fn, parsed)

    def parse_arguments(self, raw: dict[str, Any]) -> BaseModel:
        """Validate raw arguments.

        Raises:
            pydantic.ValidationError: the arguments do not fit the schema.
        """
        return self.arguments.model_validate(raw)

    async def invoke(self, raw: dict[str, Any]) -> Any:
        """Validate ``raw`` and call the function (awaiting it when async).

        Sync functions run in the calling thread; the activity that calls this decides on
        threads. Raises what the function raises, or ``ValidationError`` for bad arguments.
        """
        result = self.bind(self.parse_arguments(raw))()
        if inspect.isawaitable(result):
            result = await result
        return result


LOCAL_SECONDS_MIN = 0.001
"""The least ``local_seconds`` a tool may ask: less is no bound (a timeout under half a
microsecond is 0, which Temporal reads as unset)."""
LOCAL_SECONDS_MAX = 10.0
"""The most ``local_seconds`` a tool may ask: a local activity holds its Run's workflow task
(the SDK heartbeats it), and a call that long gains nothing from skipping a task of its own."""


def _local_seconds(name: str, local_seconds: float | None, idempotent: bool) -> float | None:
    """``local_seconds`` checked: a number of seconds in bounds, and only for a tool safe to
    repeat (a worker that dies mid-call runs a local call again).

    Raises:
        RegistryError: it is not a number in [``LOCAL_SECONDS_MIN``, ``LOCAL_SECONDS_MAX``],
            or the tool is not registered ``idempotent=True``.
    """
    if local_seconds is None:
        return None
    if isinstance(local_seconds, bool) or not isinstance(local_seconds, int | float):
        raise RegistryError(
            f"tool {name!r}: local_seconds must be a number of seconds, not {local_seconds!r}"
        )
    if not LOCAL_SECONDS_MIN <= local_seconds <= LOCAL_SECONDS_MAX:
        raise RegistryError(
            f"tool {name!r}: local_seconds must be at least {LOCAL_SECONDS_MIN:g} and at most "
            f"{LOCAL_SECONDS_MAX:g}, not {local_seconds!r}"
        )
    if not idempotent:
        raise RegistryError(
            f"tool {name!r}: local_seconds needs idempotent=True: a local call is run again "
            "when the worker running it dies, so only a tool safe to repeat may run locally"
        )
    return float(local_seconds)


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The summary paragraph and the ``Args:`` descriptions of a Google-style docstring."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    args: dict[str, str] = {}
    index = 0
    while index < len(lines) and lines[index].strip():
        if _SECTION_HEADER.match(lines[index]):
            break
        summary.append(lines[index].strip())
        index += 1
    current: str | None = None
    in_args = False
    for line in lines[index:]:
        if _ARGS_HEADER.match(line):
            in_args, current = True, None
            continue
        if in_args and _SECTION_HEADER.match(line) and not line.startswith((" ", "\t")):
            in_args = False
            continue
        if not in_args:
            continue
        match = _ARG_LINE.match(line)
        indent = len(line) - len(line.lstrip())
        if match and indent <= 4:
            current = match.group(1).lstrip("*")
            args[current] = match.group(3).strip()
        elif current and line.strip():
            args[current] = f"{args[current]} {line.strip()}".strip()
    return " ".join(summary), args


def _arguments_model(name: str, fn: Callable[..., Any], docs: dict[str, str]) -> type[BaseModel]:
    signature = inspect.signature(fn)
    try:
        hints = get_type_hints(fn)
    except Exception as err:  # NameError etc. from unresolvable annotations
        raise RegistryError(f"tool {name!r}: cannot resolve type hints: {err}") from err
    fields: dict[str, Any] = {}
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise RegistryError(
                f"tool {name!r}: *{param.name}/**{param.name} cannot be described to a model; "
                "declare each argument"
            )
        if param.kind is param.POSITIONAL_ONLY:
            raise RegistryError(
                f"tool {name!r}: positional-only argument {param.name!r} cannot be passed by "
                "name; make it a regular argument"
            )
        if param.name.startswith("_") or hasattr(BaseModel, param.name):
            raise RegistryError(
                f"tool {name!r}: argument name {param.name!r} is reserved by pydantic; rename it"
            )
        if param.name not in hints:
            raise RegistryError(f"tool {name!r}: argument {param.name!r} has no type hint")
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (
            hints[param.name],
            Field(default, description=docs.get(param.name) or None),
        )
    model: type[BaseModel] = create_model(
        f"{name}_arguments",
        __config__=ConfigDict(extra="forbid"),
        **fields,
    )
    return model


class ToolRegistry:
    """Code tools by name. Register at import time; a worker loads it at boot."""

    def __init__(self) -> None:
        self._tools: dict[str, ToolDef] = {}

    def _add(self, tool: ToolDef) -> None:
        if not _NAME.fullmatch(tool.name):  # match: its "$" also matches before a final "\n"
            raise RegistryError(f"tool name {tool.name!r} does not match {NAME_PATTERN}")
        if tool.name in RESERVED_TOOL_NAMES:
            raise RegistryError(f"tool name {tool.name!r} is taken by a built-in tool")
        if tool.name in self._tools:
            raise RegistryError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    @overload
    def register(
        self,
        fn: _F,
        *,
        name: str | None = None,
        description: str | None = None,
        idempotent: bool = False,
        read_only: bool | None = None,
        destructive: bool | None = None,
        local_seconds: float | None = None,
    ) -> _F: ...

    @overload
    def register(
        self,
        fn: None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        idempotent: bool = False,
        read_only: bool | None = None,
        destructive: bool | None = None,
        local_seconds: float | None = None,
    ) -> Callable[[_F], _F]: ...

    def register(
        self,
        fn: _F | None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        idempotent: bool = False,
        read_only: bool | None = None,
        destructive: bool | None = None,
        local_seconds: float | None = None,
    ) -> _F | Callable[[_F], _F]:
        """Register a sync or async function; usable bare or as ``@registry.register(...)``.

        The schema comes from the type hints (every argument needs one) and the description
        from the docstring's summary unless given. ``read_only``/``destructive`` annotate the
        tool for policies (unannotated = write). ``local_seconds`` (with ``idempotent=True``)
        runs the tool's calls as local activities, each attempt given that many seconds.

        Raises:
            RegistryError: the name is taken or invalid, the signature cannot be described,
                or ``local_seconds`` is invalid or set for a tool not ``idempotent``.
        """

        def add(target: _F) -> _F:
            tool_name = name or target.__name__
            local = _local_seconds(tool_name, local_seconds, idempotent)
            summary, docs = _parse_docstring(inspect.getdoc(target))
            text = description if description is not None else summary
            if not text:
                raise RegistryError(
                    f"tool {tool_name!r}: give it a docstring or a description; "
                    "the model needs to know what it does"
                )
            self._add(
                ToolDef(
                    name=tool_name,
                    description=text,
                    arguments=_arguments_model(tool_name, target, docs),
                    fn=target,
                    idempotent=idempotent,
                    unpack=True,
                    read_only=read_only,
                    destructive=destructive,
                    local_seconds=local,
                )
            )
            return target

        return add if fn is None else add(fn)

    def register_dynamic(
        self,
        name: str,
        model: type[BaseModel],
        fn: Callable[[Any], Any],
        *,
        description: str | None = None,
        idempotent: bool = False,
        read_only: bool | None = None,
        destructive: bool | None = None,
        local_seconds: float | None = None,
    ) -> None:
        """Register ``fn(arguments: model)`` under ``name`` with a pydantic argument model.

        The model must forbid extra fields, so a model's made-up argument is an error it
        reads rather than something silently dropped.

        Raises:
            RegistryError: the name is taken or invalid, ``model`` allows extra fields, or
                ``local_seconds`` is invalid (as ``register``).
        """
        local = _local_seconds(name, local_seconds, idempotent)
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise RegistryError(f"tool {name!r}: model must be a pydantic BaseModel subclass")
        if model.model_config.get("extra") != "forbid":
            raise RegistryError(
                f"tool {name!r}: {model.__name__} must set model_config extra='forbid'"
            )
        # __doc__, not inspect.getdoc: getdoc falls back to BaseModel's own documentation.
        text = description or inspect.cleandoc(model.__doc__ or "").split("\n\n")[0].strip()
        if not text:
            raise RegistryError(f"tool {name!r}: give it a description")
        self._add(
            ToolDef(
                name=name,
                description=text,
                arguments=model,
                fn=fn,
                idempotent=idempotent,
                unpack=False,
                read_only=read_only,
                destructive=destructive,
                local_seconds=local,
            )
        )

    def get(self, name: str) -> ToolDef:
        """The tool registered as ``name``.

        Raises:
            RegistryError: nothing is registered under that name.
        """
        try:
            return self._tools[name]
        except KeyError:
            raise RegistryError(f"no code tool named {name!r} is registered") from None

    def find(self, fn: Callable[..., Any]) -> ToolDef | None:
        """The tool registered for this exact function, if any."""
        return next((tool for tool in self._tools.values() if tool.fn is fn), None)

    def names(self) -> frozenset[str]:
        """Every registered name (what ``ValidationContext.registered_tools`` wants)."""
        return frozenset(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[ToolDef]:
        return iter(sorted(self._tools.values(), key=lambda tool: tool.name))

    def __len__(self) -> int:
        return len(self._tools)
