"""The AI step: classify, extract and explain a refund request; never decide (invariant 1).

`OfflineAdvisor` is the deterministic default; `advisor.redact` masks PII before a model sees text.
"""

from refund_desk.advisor.offline import (
    OfflineAdvisor,
    classify,
    detect_injection,
    extract_amount,
    extract_order_ref,
)

__all__ = [
    "OfflineAdvisor",
    "classify",
    "detect_injection",
    "extract_amount",
    "extract_order_ref",
]
