"""Errors of the policy package: all ``ValueError``, so a caller turning bad input into a 4xx
catches one type.

Evaluation problems (a ``null`` compared, a non-boolean ``when``) are *not* exceptions: they
become a ``review`` decision with ``error`` set, so a person sees them (never a silent false).
"""

from __future__ import annotations

from dataclasses import dataclass


class PolicyError(ValueError):
    """Base of everything the policy package raises on bad input."""


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a policy document, located precisely enough to fix it."""

    rule: str | None
    path: str
    message: str

    def __str__(self) -> str:
        where = f"rule {self.rule}: " if self.rule else ""
        path = f"{self.path}: " if self.path else ""
        return f"{where}{path}{self.message}"


class PolicyInvalid(PolicyError):
    """The document is not a valid policy; ``problems`` lists all that were found."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = list(problems)
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.problems)


class ContextInvalid(PolicyError):
    """A context handed to the engine does not match the documented facts.

    ``problems`` has one message per bad fact.
    """

    def __init__(self, problems: str | list[str]) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("; ".join(self.problems))
