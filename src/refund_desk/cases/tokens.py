"""Single-use signed action tokens: what a Slack button carries instead of a decision.

A token binds one action to one case at one revision, for an exact amount and currency under
a policy version, until an expiry, with a nonce that is consumed when the action is recorded.
It is HMAC-signed with a key derived from the deployment secret, so an edited token (another
amount, another case) fails the signature, and a replayed one finds its nonce already used.
"""

from __future__ import annotations

import base64
import json
import secrets
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from refund_desk.cases.errors import TokenRefused
from refund_desk.crypto import keyed_hash, same
from refund_desk.storage.models import Case

TOKEN_LIFETIME = timedelta(days=7)
ACTIONS = ("approve", "approve_partial", "deny", "escalate")


@dataclass(frozen=True)
class ActionToken:
    case_id: str
    action: str
    amount: int  # minor units: the exact amount an approve pays; the ceiling for a partial one
    currency: str
    revision: int
    policy_version: int | None
    expires: int  # unix seconds
    nonce: str


def issue(
    secret: str,
    *,
    case_id: str,
    action: str,
    amount: int,
    currency: str,
    revision: int,
    policy_version: int | None,
    now: datetime,
) -> str:
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}")
    token = ActionToken(
        case_id=case_id,
        action=action,
        amount=amount,
        currency=currency,
        revision=revision,
        policy_version=policy_version,
        expires=int((now + TOKEN_LIFETIME).timestamp()),
        nonce=secrets.token_urlsafe(12),
    )
    body = base64.urlsafe_b64encode(
        json.dumps(asdict(token), separators=(",", ":"), sort_keys=True).encode()
    ).decode()
    return f"{body}.{_sign(secret, body)}"


def for_case(secret: str, case: Case, action: str, *, now: datetime) -> str:
    """The token of one of ``case``'s buttons, for the case as it is now (its amount, revision
    and policy version): a Slack card's, or the web desk's confirmation's."""
    return issue(
        secret,
        case_id=case.id,
        action=action,
        amount=case.amount,
        currency=case.currency,
        revision=case.revision,
        policy_version=case.policy_version,
        now=now,
    )


def verify(secret: str, value: str, *, now: datetime) -> ActionToken:
    """Check signature and expiry; the caller checks the nonce, revision and authority."""
    body, _, signature = value.partition(".")
    if not body or not signature or not same(_sign(secret, body), signature):
        raise TokenRefused("token_invalid", "This button's token is not valid.")
    try:
        token = ActionToken(**json.loads(base64.urlsafe_b64decode(body.encode())))
    except (ValueError, TypeError):
        raise TokenRefused("token_invalid", "This button's token is not valid.") from None
    if now.timestamp() > token.expires:
        raise TokenRefused("token_expired", "This button has expired; open the case again.")
    return token


def _sign(secret: str, body: str) -> str:
    return keyed_hash(secret, "action-tokens", body)
