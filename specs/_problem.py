"""``Problem``: one thing wrong with a Spec, as validation and admission report it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Problem:
    """One thing wrong with a Spec.

    Attributes:
        path: where, as ``tools[issue_refund].url`` or ``steps[welcome].spec.model.model``.
        message: what is wrong, readably.
    """

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"
