"""During a rotation each platform webhook accepts the previous secret beside the current."""

from __future__ import annotations

from pydantic import SecretStr

from tests.customers.conftest import (
    EMAIL_SECRET,
    GORGIAS_SECRET,
    SHOPIFY_SECRET,
    ZENDESK_SECRET,
    Channels,
    raw_email,
)
from tests.customers.test_platform_webhooks import _shopify_return


def test_platform_webhooks_accept_the_previous_secret_during_a_rotation(
    channels: Channels,
) -> None:
    payment = channels.payment("30.00")
    body = _shopify_return(payment)
    settings = channels.runtime.settings
    # Without a rotation, only the current secret.
    assert channels.post_shopify(body, secret="shopify-new-secret-0123456789").status_code == 401
    channels.runtime.settings = settings.model_copy(
        update={
            "shopify_secret": SecretStr("shopify-new-secret-0123456789"),
            "shopify_secret_previous": settings.shopify_secret,
            "zendesk_secret": SecretStr("zendesk-new-secret-0123456789"),
            "zendesk_secret_previous": settings.zendesk_secret,
            "gorgias_secret": SecretStr("gorgias-new-secret-0123456789"),
            "gorgias_secret_previous": settings.gorgias_secret,
            "email_secret": SecretStr("email-new-secret-0123456789"),
            "email_secret_previous": settings.email_secret,
        }
    )
    assert channels.post_shopify(body, secret=SHOPIFY_SECRET).status_code == 201
    again = _shopify_return(payment, return_id=9002)
    assert channels.post_shopify(again, secret="shopify-new-secret-0123456789").status_code in (
        200,
        201,
    )
    assert channels.post_shopify(again, secret="neither-0123456789").status_code == 401

    zd = b'{"ticket": {"id": 1}}'
    assert channels.post_zendesk(zd, secret="neither-0123456789").status_code == 401
    assert channels.post_zendesk(zd, secret=ZENDESK_SECRET).status_code != 401
    assert channels.post_zendesk(zd, secret="zendesk-new-secret-0123456789").status_code != 401

    for secret, expected_ok in (
        (GORGIAS_SECRET, True),
        ("gorgias-new-secret-0123456789", True),
        ("neither-0123456789", False),
    ):
        response = channels.client.post(
            "/webhooks/gorgias", content=b"{}", headers={"Authorization": f"Bearer {secret}"}
        )
        assert (response.status_code != 401) is expected_ok, (secret, response.text)

    mail = raw_email(subject=f"Refund for order {payment}", text="Broken.")
    assert channels.post_email(mail, secret="neither-0123456789").status_code == 401
    assert channels.post_email(mail, secret=EMAIL_SECRET).status_code != 401
    assert channels.post_email(mail, secret="email-new-secret-0123456789").status_code != 401
