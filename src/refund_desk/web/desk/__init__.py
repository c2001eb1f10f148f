"""The desk on the web: the record finance, ops leads and auditors read, signed in with Slack.

Every page is server-rendered (Jinja2, `templates/desk/`), works without JavaScript, and is
served from the package (`/static/desk.css`, `/static/desk.js`; no CDN). The person is the Slack
user their session names (`session.py`), with the roles the active policy gives them; a
decision goes through `cases/approvals.py`, the same function, token and checks as a Slack click.

Parts: `auth.py` (Sign in with Slack), `queue.py` (the cases this person may decide), `cases.py`
(search, filters, export), `record.py` (one case, as an auditor follows it), `policy.py`,
`insights.py`. `install` mounts them.
"""

from __future__ import annotations

from importlib import resources
from urllib.parse import quote

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import RedirectResponse, Response

from refund_desk.web.desk import session
from refund_desk.web.desk.access import NoRole, SignInNeeded
from refund_desk.web.desk.render import page

STATIC = {"desk.css": "text/css", "desk.js": "text/javascript", "pages.css": "text/css"}


def install(app: FastAPI) -> None:
    from refund_desk.web.desk import auth, cases, insights, policy, queue, record

    for part in (auth, queue, cases, record, policy, insights):
        app.include_router(part.router)
    app.include_router(_static)

    @app.exception_handler(SignInNeeded)
    async def _sign_in(request: Request, exc: SignInNeeded) -> Response:
        if request.method in ("GET", "HEAD"):
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(f"/desk/sign-in?next={quote(target, safe='')}", 303)
        return page(
            request,
            None,
            "signed_out.html",
            title="Signed out",
            status=401,
            next_url=request.headers.get("referer", "/desk"),
        )

    @app.exception_handler(NoRole)
    async def _no_role(request: Request, exc: NoRole) -> Response:
        return page(request, exc.viewer, "no_role.html", title="No role on the desk", status=403)


_static = APIRouter(include_in_schema=False)


@_static.get("/static/{name}")
def static_file(name: str) -> Response:
    if name not in STATIC:
        return Response("Not found", status_code=404, media_type="text/plain")
    body = resources.files("refund_desk.web").joinpath("static", name).read_bytes()
    return Response(body, media_type=STATIC[name], headers={"Cache-Control": "max-age=300"})


__all__ = ["install", "session"]
