"""The reference for `throughput_bench.py`: a bare FastAPI endpoint on the same stack.

It validates the same JSON body as the intake API with pydantic and does one SQLAlchemy
`INSERT` per request, on the same database settings (SQLite in WAL mode, or PostgreSQL).

    DATABASE_URL=... python -m uvicorn bare_app:app --app-dir bench/parts
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, EmailStr, Field
from sqlalchemy import (
    Column,
    DateTime,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    event,
    insert,
)

URL = os.environ["DATABASE_URL"]
if URL.startswith("sqlite"):
    engine = create_engine(URL, connect_args={"check_same_thread": False, "timeout": 30})

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

else:
    engine = create_engine(URL, pool_size=10, max_overflow=10)

metadata = MetaData()
requests = Table(
    "bare_requests",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("payment", String(100), nullable=False),
    Column("email", String(320), nullable=False),
    Column("currency", String(3), nullable=False),
    Column("amount", String(32)),
    Column("message", Text),
    Column("created_at", DateTime(timezone=True), nullable=False),
)
metadata.create_all(engine)


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    payment: str = Field(min_length=3, max_length=100, pattern=r"^[A-Za-z0-9_\-]+$")
    email: EmailStr
    currency: str = Field(min_length=3, max_length=3)
    amount: str | None = Field(default=None, max_length=32)
    message: str | None = Field(default=None, max_length=10_000)


app = FastAPI()


@app.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@app.post("/api/v1/refund-requests", status_code=201)
def create(body: Body) -> dict[str, Any]:
    with engine.begin() as conn:
        new_id = conn.execute(
            insert(requests)
            .values(**body.model_dump(), created_at=datetime.now(UTC))
            .returning(requests.c.id)
        ).scalar_one()
    return {"id": new_id, "status": "received", **body.model_dump()}
