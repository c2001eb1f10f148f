"""`POST /webhooks/stripe`: the signature is verified before anything else happens (404, as
an unknown path, without `STRIPE_WEBHOOK_SECRET`)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from refund_desk.payments import webhooks
from refund_desk.payments.stripe_api import WebhookRejected
from refund_desk.web.errors import error_response, no_such_route

router = APIRouter()


@router.post("/webhooks/stripe")
async def stripe_webhook(request: Request) -> JSONResponse:
    runtime = request.app.state.runtime
    if runtime.settings.stripe_webhook_secret is None:  # STRIPE_WEBHOOK_SECRET
        raise no_such_route()
    payload = await request.body()
    signature = request.headers.get("stripe-signature")
    desk = runtime.desk
    try:
        receipt = await run_in_threadpool(
            webhooks.receive,
            desk,
            payload,
            signature,
            runtime.settings.webhook_secrets("stripe_webhook_secret"),
        )
    except WebhookRejected as exc:
        return error_response(exc.code, exc.message, 400)
    if receipt.job_id is not None:
        await run_in_threadpool(desk.start, receipt.job_id)  # a failure stays queued, retried
    return JSONResponse(
        {"received": True, "event": receipt.event_id, "duplicate": receipt.duplicate}
    )
