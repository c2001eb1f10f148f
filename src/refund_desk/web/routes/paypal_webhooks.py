"""`POST /webhooks/paypal`: PayPal's own verification of the signature before anything else."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from refund_desk.cases.ports import ProcessorError
from refund_desk.payments import webhooks
from refund_desk.payments.stripe_api import WebhookRejected
from refund_desk.web.errors import error_response, no_such_route

router = APIRouter()


@router.post("/webhooks/paypal")
async def paypal_webhook(request: Request) -> JSONResponse:
    runtime = request.app.state.runtime
    if runtime.paypal is None or not runtime.settings.paypal_webhook_id:
        raise no_such_route()
    payload = await request.body()
    desk = runtime.desk
    try:
        receipt = await run_in_threadpool(
            webhooks.receive_paypal, desk, runtime.paypal, payload, request.headers
        )
    except WebhookRejected as exc:
        return error_response(exc.code, exc.message, 400)
    except ProcessorError as exc:  # PayPal could not be asked: it delivers again later
        return error_response(exc.code, f"Could not verify with PayPal: {exc.message}", 503)
    if receipt.job_id is not None:
        await run_in_threadpool(desk.start, receipt.job_id)  # a failure stays queued, retried
    return JSONResponse(
        {"received": True, "event": receipt.event_id, "duplicate": receipt.duplicate}
    )
