"""During a rotation the Stripe webhook accepts the previous signing secret beside the current."""

from __future__ import annotations

from pydantic import SecretStr

from tests.fakes.stripe_fake import FakeStripeServer
from tests.payments.conftest import WEBHOOK_SECRET, StripeHarness
from tests.payments.test_webhooks import fixture, refunded_case, signed


def test_stripe_webhooks_accept_the_previous_secret_during_a_rotation(
    on_fake: StripeHarness, fake_stripe: FakeStripeServer
) -> None:
    ids = refunded_case(on_fake, fake_stripe)
    settings = on_fake.runtime.settings
    on_fake.runtime.settings = settings.model_copy(
        update={
            "stripe_webhook_secret": SecretStr("whsec_new_" + "1" * 24),
            "stripe_webhook_secret_previous": settings.stripe_webhook_secret,
        }
    )
    body = fixture("refund.updated", **ids)
    assert on_fake.webhook(body, signed(body, secret=WEBHOOK_SECRET)).status_code == 200
    body = fixture("refund.updated", **ids)
    assert on_fake.webhook(body, signed(body, secret="whsec_new_" + "1" * 24)).status_code == 200
    body = fixture("refund.updated", **ids)
    refused = on_fake.webhook(body, signed(body, secret="whsec_neither_" + "2" * 20))
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "invalid_signature"
