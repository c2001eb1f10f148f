"""Who may see a desk page: FastAPI dependencies every desk route declares.

`signed_in` is any person Slack vouched for; `reader` is one the policy gives a role
(`people.may_read`, the rule of every surface): anyone else sees only that they have none. A
session's idle clock starts again on each request that shows it.
"""

from __future__ import annotations

from fastapi import Request

from refund_desk.runtime import Runtime
from refund_desk.web.desk import session
from refund_desk.web.desk.session import Viewer


class SignInNeeded(Exception):
    """No session, or one that lapsed: GET goes to the sign-in page, a form is refused."""


class NoRole(Exception):
    def __init__(self, viewer: Viewer) -> None:
        super().__init__(viewer.user)
        self.viewer = viewer


def signed_in(request: Request) -> Viewer:
    runtime: Runtime = request.app.state.runtime
    found = session.read(request, runtime.settings.secret_value())
    if found is None:
        raise SignInNeeded()
    request.state.desk_session = found  # `render.page` and `finish` keep it alive
    return session.viewer(runtime, found)


def reader(request: Request) -> Viewer:
    viewer = signed_in(request)
    if not viewer.may_read:
        raise NoRole(viewer)
    return viewer
