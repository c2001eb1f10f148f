"""A model advisor that falls back to the offline one: a model failure is never "no advice".

A timeout, an unreachable endpoint, an answer outside the schema, a refusal or a stop other
than `stop` gives the offline advice, marked with `fallback` (the model's error code) and the
tokens the failed call spent; the policy then decides the case as it decides any other.
"""

from __future__ import annotations

from dataclasses import replace

from refund_desk.advisor.offline import OfflineAdvisor
from refund_desk.cases.ports import Advice, AdviceRequest, Advisor, AdvisorError

__all__ = ["FallbackAdvisor"]


class FallbackAdvisor:
    """`primary` (a model), with `OfflineAdvisor` standing in whenever it fails."""

    def __init__(self, primary: Advisor) -> None:
        self.primary = primary
        self.fallback = OfflineAdvisor()
        self.name = primary.name
        self.model: str | None = getattr(primary, "model", None)

    @property
    def budget_seconds(self) -> float:
        return float(getattr(self.primary, "budget_seconds", 0.0)) + 1.0

    def advise(self, request: AdviceRequest) -> Advice:
        try:
            return self.primary.advise(request)
        except AdvisorError as exc:
            advice = self.fallback.advise(request)
            return replace(
                advice,
                fallback=exc.code,
                fallback_format_error=exc.format_error,
                model=self.model,
                tokens_used=exc.tokens_used,
                prompt_tokens=exc.tokens_used,
                completion_tokens=0,
            )
