"""The migrations build exactly the schema the models describe, on both databases."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlmodel import SQLModel

import refund_desk.storage.models  # noqa: F401  (registers the tables)
from refund_desk.storage.db import Database
from refund_desk.storage.migrate import alembic_config


def test_one_linear_history_of_migrations() -> None:
    script = ScriptDirectory.from_config(alembic_config())
    assert len(script.get_heads()) == 1


def test_migrated_schema_matches_the_models(any_db_url: str) -> None:
    db = Database.from_url(any_db_url)
    try:
        with db.engine.connect() as connection:
            diff = compare_metadata(MigrationContext.configure(connection), SQLModel.metadata)
    finally:
        db.dispose()
    assert diff == []
