"""customer channels: evidence and appeals on the case, customer messages, rate limits

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from refund_desk.storage.types import UTCDateTime

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("cases", schema=None) as batch_op:
        batch_op.add_column(sa.Column("evidence", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("appeal_of", sa.String(length=40), nullable=True))
        batch_op.add_column(sa.Column("reply_enc", sa.Text(), nullable=True))
        batch_op.create_index(batch_op.f("ix_cases_appeal_of"), ["appeal_of"], unique=True)
    op.create_table(
        "customer_messages",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("case_id", sa.String(length=40), nullable=False),
        sa.Column("direction", sa.String(length=3), nullable=False),
        sa.Column("kind", sa.String(length=30), nullable=False),
        sa.Column("case_status", sa.String(length=20), nullable=True),
        sa.Column("case_revision", sa.Integer(), nullable=True),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("expected_by", UTCDateTime(), nullable=True),
        sa.Column("channel", sa.String(length=20), nullable=True),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("external_ref", sa.String(length=300), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("sent_at", UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(["case_id"], ["cases.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("customer_messages", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_customer_messages_case_id"), ["case_id"], unique=False)
    op.create_table(
        "rate_limits",
        sa.Column("key", sa.String(length=100), nullable=False),
        sa.Column("window", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("key", "window"),
    )


def downgrade() -> None:
    op.drop_table("rate_limits")
    with op.batch_alter_table("customer_messages", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_customer_messages_case_id"))
    op.drop_table("customer_messages")
    with op.batch_alter_table("cases", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_cases_appeal_of"))
        batch_op.drop_column("reply_enc")
        batch_op.drop_column("appeal_of")
        batch_op.drop_column("evidence")
