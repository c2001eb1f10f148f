"""Shared fixtures: the DESIGN.md reference policy and ways to make variants of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from refund_desk.policy import CompiledPolicy, PolicyDocument, parse_policy

ACME_PATH = Path(__file__).parent / "fixtures" / "acme.yaml"


def acme_text() -> str:
    return ACME_PATH.read_text()


def acme_raw() -> dict[str, Any]:
    data = yaml.safe_load(acme_text())
    assert isinstance(data, dict)
    return data


def dump(raw: dict[str, Any]) -> str:
    return yaml.safe_dump(raw, sort_keys=False)


@pytest.fixture
def acme() -> PolicyDocument:
    return parse_policy(acme_text())


@pytest.fixture
def compiled(acme: PolicyDocument) -> CompiledPolicy:
    return CompiledPolicy.compile(acme)


def case(
    amount: int = 2000,
    refundable: int = 10_000,
    currency: str = "USD",
    **sections: dict[str, Any],
) -> dict[str, Any]:
    """A plausible production context (minor units), every fact set, safe by default."""
    ctx: dict[str, Any] = {
        "request": {
            "amount": amount,
            "currency": currency,
            "reason": "damaged",
            "source": "api",
            "possible_duplicate": False,
            "amount_source": "customer_input",
        },
        "order": {
            "amount": refundable,
            "refunded": 0,
            "refundable": refundable,
            "currency": currency,
            "age_days": 3,
        },
        "customer": {"verified": True, "chargebacks_365d": 0, "refunds_90d": 0, "open_cases": 0},
        "advisor": {"confidence": 0.9, "injection_suspected": False},
        "evidence": {"count": 1, "checked": 1},
    }
    for section, fields in sections.items():
        ctx[section].update(fields)
    return ctx
