"""processor webhook events and reconciliation findings

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from refund_desk.storage.types import UTCDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "processor_events",
        sa.Column("id", sa.String(length=100), nullable=False),
        sa.Column("processor", sa.String(length=20), nullable=False),
        sa.Column("type", sa.String(length=80), nullable=False),
        sa.Column("object_id", sa.String(length=100), nullable=True),
        sa.Column("received_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "processor_findings",
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("kind", sa.String(length=40), nullable=False),
        sa.Column("case_id", sa.String(length=40), nullable=True),
        sa.Column("execution_id", sa.String(length=40), nullable=True),
        sa.Column("refund_id", sa.String(length=100), nullable=True),
        sa.Column("payment_id", sa.String(length=100), nullable=True),
        sa.Column("currency", sa.String(length=3), nullable=True),
        sa.Column("processor_amount", sa.BigInteger(), nullable=True),
        sa.Column("our_amount", sa.BigInteger(), nullable=True),
        sa.Column("processor_status", sa.String(length=30), nullable=True),
        sa.Column("our_status", sa.String(length=30), nullable=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("found_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("key"),
    )
    with op.batch_alter_table("processor_findings", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_processor_findings_case_id"), ["case_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("processor_findings", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_processor_findings_case_id"))
    op.drop_table("processor_findings")
    op.drop_table("processor_events")
