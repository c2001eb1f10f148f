"""the AI advisor: provenance per case, advisor calls (format adherence and tokens)

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from refund_desk.storage.types import UTCDateTime

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("cases", schema=None) as batch_op:
        batch_op.add_column(sa.Column("provenance", sa.JSON(), nullable=True))
    op.create_table(
        "advisor_calls",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.Column("day", sa.String(length=10), nullable=False),
        sa.Column("case_id", sa.String(length=40), nullable=True),
        sa.Column("provider", sa.String(length=30), nullable=False),
        sa.Column("model", sa.String(length=100), nullable=True),
        sa.Column("outcome", sa.String(length=20), nullable=False),
        sa.Column("error_code", sa.String(length=60), nullable=True),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("advisor_calls", schema=None) as batch_op:
        batch_op.create_index("ix_advisor_calls_day", ["day", "provider"], unique=False)
        batch_op.create_index(batch_op.f("ix_advisor_calls_case_id"), ["case_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("advisor_calls", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_advisor_calls_case_id"))
        batch_op.drop_index("ix_advisor_calls_day")
    op.drop_table("advisor_calls")
    with op.batch_alter_table("cases", schema=None) as batch_op:
        batch_op.drop_column("provenance")
