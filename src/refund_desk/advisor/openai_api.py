"""The OpenAI-compatible advisor: the one module that imports `openai` (STYLE 4).

Any Chat Completions endpoint works (`OPENAI_BASE_URL`). Only redacted text and the policy's
own rule texts leave the process (DESIGN invariant 7): never the email, the name, the raw
message or anything from the processor. The answer must parse into `ModelAnswer`; a timeout,
a transport error, invalid JSON or a schema violation becomes an `AdvisorError` on the spot,
and the workflow sends the case to a person with that reason (nothing fails silently).
"""

from __future__ import annotations

import json
from typing import Any, cast

import openai
from pydantic import ValidationError

from refund_desk import money
from refund_desk.advisor.offline import detect_injection
from refund_desk.advisor.prompt import SCHEMA, ModelAnswer, messages
from refund_desk.advisor.redact import redact
from refund_desk.cases.ports import Advice, AdviceRequest, AdvisorError

__all__ = ["DEFAULT_MODEL", "OpenAIAdvisor"]

DEFAULT_MODEL = "gpt-4o-mini"
TIMEOUT_SECONDS = 10.0
MAX_RETRIES = 2  # the SDK retries timeouts, connection errors, 429 and 5xx with backoff
_FORMAT: Any = {
    "type": "json_schema",
    "json_schema": {"name": "refund_advice", "strict": True, "schema": SCHEMA},
}


class OpenAIAdvisor:
    """Classify, extract and summarise with a model; never decide."""

    name = "openai"

    def __init__(
        self,
        *,
        api_key: str,
        model: str | None = None,
        base_url: str | None = None,
        timeout: float = TIMEOUT_SECONDS,
        max_retries: int = MAX_RETRIES,
    ) -> None:
        self.model = model or DEFAULT_MODEL
        self.timeout = timeout
        self.max_retries = max_retries
        self._client = openai.OpenAI(
            api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries
        )

    @property
    def budget_seconds(self) -> float:
        """The longest one `advise` can take, retries and backoff included (for job leases)."""
        return self.timeout * (self.max_retries + 1) + 8.0 * self.max_retries

    def advise(self, request: AdviceRequest) -> Advice:
        red = redact(request.message, names=request.known_names, emails=request.known_emails)
        try:
            completion = self._client.chat.completions.create(
                model=self.model,
                messages=cast(Any, messages(red.text, request.currency, request.policy)),
                response_format=_FORMAT,
                temperature=0,
            )
        except openai.APITimeoutError:
            raise AdvisorError(
                "model_timeout", f"the model did not answer within {self.timeout:g}s"
            ) from None
        except openai.APIConnectionError:
            raise AdvisorError("model_unreachable", "the model endpoint is unreachable") from None
        except openai.APIStatusError as exc:
            raise AdvisorError(
                "model_error", f"the model endpoint answered HTTP {exc.status_code}"
            ) from None
        except openai.OpenAIError as exc:
            raise AdvisorError("model_error", type(exc).__name__) from None
        usage = completion.usage
        prompt_tokens = usage.prompt_tokens if usage else 0
        completion_tokens = usage.completion_tokens if usage else 0
        tokens = prompt_tokens + completion_tokens
        choice = completion.choices[0] if completion.choices else None
        if choice is not None and getattr(choice.message, "refusal", None):
            raise AdvisorError(
                "model_refusal", "the model refused to answer", format_error=True,
                tokens_used=tokens,
            )  # fmt: skip
        if choice is not None and choice.finish_reason not in (None, "stop"):
            raise AdvisorError(
                f"model_{choice.finish_reason}"[:60],
                f"the model stopped for {choice.finish_reason!r}, not at the end of its answer",
                format_error=True,
                tokens_used=tokens,
            )
        answer = _parse(choice.message.content if choice else None, tokens)
        currency = (answer.currency or request.currency or "").upper() or None
        amount = _minor(answer.amount, currency)
        # Keep only what the text really holds: a reference the model made up is dropped.
        order_ref = answer.order_ref.removeprefix("#") if answer.order_ref else None
        if order_ref and order_ref not in red.text:
            order_ref = None
        known = {p.rule for p in request.policy}
        cited = tuple(r for r in answer.cited_rules if r in known)
        question = answer.intent == "policy_question"
        return Advice(
            reason="other" if question else answer.reason,
            confidence=answer.confidence,
            order_ref=order_ref,
            amount_minor=amount,
            currency=currency if amount is not None else (request.currency or None),
            summary=" ".join(answer.summary.split())[:600],
            # Our own check counts too: a model talked round by the text may not say so.
            injection_suspected=answer.injection_suspected or detect_injection(request.message),
            provider=self.name,
            tokens_used=tokens,
            intent=answer.intent,
            cited_rules=cited if question else (),
            model=self.model,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
        )


def _parse(content: str | None, tokens: int) -> ModelAnswer:
    if not content:
        raise AdvisorError(
            "model_empty", "the model gave no answer", format_error=True, tokens_used=tokens
        )
    try:
        data = json.loads(content)
    except json.JSONDecodeError:
        raise AdvisorError(
            "invalid_json", "the model's answer is not JSON", format_error=True, tokens_used=tokens
        ) from None
    try:
        return ModelAnswer.model_validate(data)
    except ValidationError as exc:
        fields = sorted({".".join(str(p) for p in e["loc"]) or "answer" for e in exc.errors()})
        raise AdvisorError(
            "schema_violation",
            f"the model's answer does not fit the schema ({', '.join(fields)})",
            format_error=True,
            tokens_used=tokens,
        ) from None


def _minor(amount: str | None, currency: str | None) -> int | None:
    """The model's amount in minor units, or None: an unreadable amount is simply not advice."""
    if amount is None or currency is None:
        return None
    try:
        value = money.to_minor(amount.strip(), currency)
    except ValueError:
        return None
    return value if value > 0 else None
