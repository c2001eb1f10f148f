"""The one error envelope every HTTP route answers with: `{"error": {code, message, fields}}`."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse


def error_body(code: str, message: str, fields: dict[str, str] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "fields": fields or {}}}


def error_response(
    code: str, message: str, status: int, fields: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(error_body(code, message, fields), status_code=status)
