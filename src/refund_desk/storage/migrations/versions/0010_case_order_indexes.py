"""indexes for the orders the desk lists cases in (newest, last changed, largest amount), alone
and after a status; the status index gives way to the (status, created_at) one, whose prefix
serves every lookup by status

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

INDEXES = {
    "ix_cases_created_at": ["created_at", "id"],
    "ix_cases_updated_at": ["updated_at", "id"],
    "ix_cases_amount": ["amount", "id"],
    "ix_cases_status_created": ["status", "created_at", "id"],
    "ix_cases_status_amount": ["status", "amount", "id"],
}


def upgrade() -> None:
    for name, columns in INDEXES.items():
        op.create_index(name, "cases", columns)
    op.drop_index("ix_cases_status", table_name="cases")


def downgrade() -> None:
    op.create_index("ix_cases_status", "cases", ["status"])
    for name in INDEXES:
        op.drop_index(name, table_name="cases")
