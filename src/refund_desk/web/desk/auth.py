"""Sign in with Slack (OpenID Connect) and sign out."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import RedirectResponse, Response

from refund_desk.web.desk import session
from refund_desk.web.desk.access import signed_in
from refund_desk.web.desk.render import csrf_ok, page
from refund_desk.web.desk.session import Viewer

router = APIRouter(include_in_schema=False)


@router.get("/desk/sign-in")
def sign_in(request: Request) -> Response:
    return page(request, None, "sign_in.html", title="Sign in")


@router.post("/desk/sign-out")
def sign_out(
    request: Request, viewer: Viewer = Depends(signed_in), csrf: str = Form("")
) -> Response:
    if not csrf_ok(request, viewer, csrf):
        return page(request, viewer, "forbidden.html", title="Not signed out", status=403)
    response = RedirectResponse("/desk/sign-in", 303)
    session.end(response, request)
    return response
