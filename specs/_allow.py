"""Matching an ``allow`` list's entries (``matches``, which ``narrow`` uses), and the entries
no name can match as written (publish-time problems)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from psych_runtime.specs._problem import Problem


def matches(name: str, patterns: Iterable[str]) -> bool:
    """Whether ``name`` equals a pattern or starts with a pattern's text before a trailing ``*``."""
    for pattern in patterns:
        if pattern.endswith("*"):
            if name.startswith(pattern[:-1]):
                return True
        elif name == pattern:
            return True
    return False


def not_one_string(**given: Iterable[str] | None) -> None:
    """Refuse a string given where a sequence of names or patterns is asked: its characters
    would each be taken as one, and in patterns a ``*`` among them matches every name (a
    type checker takes a string for a ``Sequence[str]`` or an ``Iterable[str]``).

    Raises:
        TypeError: naming the argument.
    """
    for label, value in given.items():
        if isinstance(value, str):
            raise TypeError(
                f"{label} is a sequence of names, not the string {value!r}: write [{value!r}]"
            )


def allow_problems(allow: Sequence[str], path: str) -> list[Problem]:
    """Entries that no name can match as written: an empty one, and one with a ``*``
    before its end (a ``*`` only ends a prefix; inside an entry it is a literal character,
    which no tool or skill name holds, so the entry would silently grant nothing); and a
    string given for the whole list, whose characters would each be an entry, a ``*``
    among them granting every name."""
    if isinstance(allow, str):
        return [
            Problem(
                path, f"a list of names and prefixes, not the string {allow!r}: write [{allow!r}]"
            )
        ]
    problems = []
    for entry in allow:
        if not entry:
            problems.append(
                Problem(
                    path, "an empty entry grants nothing; give a name, or a prefix ending in '*'"
                )
            )
        elif "*" in entry[:-1]:
            problems.append(
                Problem(
                    path,
                    f"{entry!r}: '*' may only end an entry (a prefix such as 'get_*'); an "
                    "entry matches a name exactly or by its trailing '*', nothing else",
                )
            )
    return problems
