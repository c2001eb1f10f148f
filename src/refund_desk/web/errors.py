"""The one error envelope every HTTP route answers with: `{"error": {code, message, fields}}`."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException


def error_body(code: str, message: str, fields: dict[str, str] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "fields": fields or {}}}


def no_such_route() -> HTTPException:
    """Raised by a webhook whose integration is not configured here: the app answers it as it
    answers a path it does not know (404, `not_found`), so a stranger learns nothing of which
    integrations a desk has."""
    return HTTPException(404)


def error_response(
    code: str, message: str, status: int, fields: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(error_body(code, message, fields), status_code=status)
