"""Schema migrations with Alembic, run from code so no ini file has to sit in the cwd."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, text

MIGRATIONS = Path(__file__).with_name("migrations")
PG_MIGRATION_LOCK = 7_140_331  # advisory lock id: replicas starting together migrate once


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def upgrade(engine: Engine, revision: str = "head") -> None:
    config = alembic_config()
    with engine.connect() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_lock(:k)"), {"k": PG_MIGRATION_LOCK})
            connection.commit()
        try:
            config.attributes["connection"] = connection
            command.upgrade(config, revision)
            connection.commit()
        finally:
            if connection.dialect.name == "postgresql":
                connection.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": PG_MIGRATION_LOCK})
                connection.commit()


def revise(engine: Engine, message: str) -> None:
    """Developer helper: autogenerate a new revision against a database at head."""
    config = alembic_config()
    with engine.connect() as connection:
        config.attributes["connection"] = connection
        command.revision(config, message=message, autogenerate=True)
