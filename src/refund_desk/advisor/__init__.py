"""The AI step: classify, extract and explain a refund request; never decide (invariant 1).

`OfflineAdvisor` is the deterministic default; `redact` masks PII before any model sees text.
"""

from refund_desk.advisor.offline import (
    OfflineAdvisor,
    classify,
    detect_injection,
    extract_amount,
    extract_order_ref,
)
from refund_desk.advisor.redact import KINDS, Redacted, iban_valid, luhn_valid, redact

__all__ = [
    "KINDS",
    "OfflineAdvisor",
    "Redacted",
    "classify",
    "detect_injection",
    "extract_amount",
    "extract_order_ref",
    "iban_valid",
    "luhn_valid",
    "redact",
]
