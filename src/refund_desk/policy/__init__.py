"""Policy documents: schema, expression evaluation, guardrails, embedded tests.

Pure: imports pydantic, yaml, zen and the standard library, never a vendor SDK.
"""

from refund_desk.policy.context import (
    FACTS,
    build_context,
    complete_context,
    neutral_context,
    null_context,
)
from refund_desk.policy.durations import parse_duration, sla_deadline
from refund_desk.policy.engine import CompiledPolicy, Decision
from refund_desk.policy.errors import ContextInvalid, PolicyError, PolicyInvalid, Problem
from refund_desk.policy.schema import PolicyDocument, approver_limit, parse_policy, policy_hash
from refund_desk.policy.testing import run_policy_tests

__all__ = [
    "FACTS",
    "CompiledPolicy",
    "ContextInvalid",
    "Decision",
    "PolicyDocument",
    "PolicyError",
    "PolicyInvalid",
    "Problem",
    "approver_limit",
    "build_context",
    "complete_context",
    "neutral_context",
    "null_context",
    "parse_duration",
    "parse_policy",
    "policy_hash",
    "run_policy_tests",
    "sla_deadline",
]
