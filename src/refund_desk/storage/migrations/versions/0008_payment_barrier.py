"""the pay step's barrier: when an execution was last sent to the processor; the sandbox's
ignored idempotency keys

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from refund_desk.storage.types import UTCDateTime

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("executions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("sent_at", UTCDateTime(), nullable=True))
    with op.batch_alter_table("sandbox_faults", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("ignore_keys", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("sandbox_faults", schema=None) as batch_op:
        batch_op.drop_column("ignore_keys")
    with op.batch_alter_table("executions", schema=None) as batch_op:
        batch_op.drop_column("sent_at")
