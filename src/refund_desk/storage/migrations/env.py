"""Alembic environment: the URL comes from the caller (`refund-desk db upgrade`), not an ini."""

from __future__ import annotations

from alembic import context
from sqlmodel import SQLModel

import refund_desk.storage.models  # noqa: F401  (registers the tables)

config = context.config
target_metadata = SQLModel.metadata

connection = config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through refund_desk.storage.migrate")

context.configure(
    connection=connection,
    target_metadata=target_metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
