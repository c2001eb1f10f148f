"""operations: API key use and rotation, customer data keys, erasure, replica heartbeats

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from refund_desk.storage.types import UTCDateTime

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.add_column(sa.Column("last_used_at", UTCDateTime(), nullable=True))
        batch_op.add_column(sa.Column("expires_at", UTCDateTime(), nullable=True))
    with op.batch_alter_table("cases", schema=None) as batch_op:
        batch_op.add_column(sa.Column("erased_at", UTCDateTime(), nullable=True))
    with op.batch_alter_table("advisor_calls", schema=None) as batch_op:
        batch_op.add_column(sa.Column("correlation_id", sa.String(length=40), nullable=True))
    op.create_table(
        "customer_keys",
        sa.Column("email_hash", sa.String(length=64), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("key_enc", sa.Text(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("erased_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("email_hash"),
    )
    op.create_table(
        "replica_heartbeats",
        sa.Column("replica", sa.String(length=80), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=False),
        sa.Column("swept_at", UTCDateTime(), nullable=False),
        sa.Column("sweep_seconds", sa.Float(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("replica"),
    )


def downgrade() -> None:
    op.drop_table("replica_heartbeats")
    op.drop_table("customer_keys")
    with op.batch_alter_table("advisor_calls", schema=None) as batch_op:
        batch_op.drop_column("correlation_id")
    with op.batch_alter_table("cases", schema=None) as batch_op:
        batch_op.drop_column("erased_at")
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.drop_column("expires_at")
        batch_op.drop_column("last_used_at")
