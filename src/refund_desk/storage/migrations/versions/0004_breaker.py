"""circuit breaker state on the control row

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from refund_desk.storage.types import UTCDateTime

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("control", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("consecutive_failures", sa.Integer(), nullable=False, server_default="0")
        )
        batch_op.add_column(sa.Column("breaker_tripped_at", UTCDateTime(), nullable=True))
        batch_op.add_column(sa.Column("breaker_reason", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("control", schema=None) as batch_op:
        batch_op.drop_column("breaker_reason")
        batch_op.drop_column("breaker_tripped_at")
        batch_op.drop_column("consecutive_failures")
