"""policy lifecycle: drafts, backtests, shadow decisions, review samples, control switches

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from refund_desk.storage.types import UTCDateTime

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("control", schema=None) as batch_op:
        batch_op.add_column(sa.Column("shadow_draft", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("shadow_started_at", UTCDateTime(), nullable=True))
        batch_op.add_column(sa.Column("review_sample_rate", sa.Float(), nullable=True))
        batch_op.add_column(
            sa.Column(
                "publish_needs_second_lead", sa.Boolean(), nullable=False, server_default=sa.false()
            )
        )
    op.create_table(
        "policy_drafts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=True),
        sa.Column("author", sa.String(length=100), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.Column("last_test_ok", sa.Boolean(), nullable=True),
        sa.Column("last_test_summary", sa.Text(), nullable=True),
        sa.Column("last_backtest_hash", sa.String(length=64), nullable=True),
        sa.Column("last_backtest_at", UTCDateTime(), nullable=True),
        sa.Column("last_backtest_summary", sa.JSON(), nullable=True),
        sa.Column("publish_requested_by", sa.String(length=100), nullable=True),
        sa.Column("publish_requested_hash", sa.String(length=64), nullable=True),
        sa.Column("published_version", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "policy_backtests",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("label", sa.String(length=40), nullable=False),
        sa.Column("days", sa.Integer(), nullable=False),
        sa.Column("cases", sa.Integer(), nullable=False),
        sa.Column("ran_by", sa.String(length=100), nullable=False),
        sa.Column("ran_at", UTCDateTime(), nullable=False),
        sa.Column("summary", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("policy_backtests", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_policy_backtests_content_hash"), ["content_hash"], unique=False
        )
    op.create_table(
        "shadow_decisions",
        sa.Column("case_id", sa.String(length=40), nullable=False),
        sa.Column("draft_id", sa.Integer(), nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("live_outcome", sa.String(length=20), nullable=False),
        sa.Column("live_rule", sa.String(length=100), nullable=False),
        sa.Column("outcome", sa.String(length=20), nullable=False),
        sa.Column("rule", sa.String(length=100), nullable=False),
        sa.Column("agree", sa.Boolean(), nullable=False),
        sa.Column("amount", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("case_id"),
    )
    with op.batch_alter_table("shadow_decisions", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_shadow_decisions_draft_id"), ["draft_id"], unique=False
        )
    op.create_table(
        "review_samples",
        sa.Column("case_id", sa.String(length=40), nullable=False),
        sa.Column("policy_version", sa.Integer(), nullable=True),
        sa.Column("rule", sa.String(length=100), nullable=False),
        sa.Column("amount", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("sampled_at", UTCDateTime(), nullable=False),
        sa.Column("answer", sa.String(length=20), nullable=True),
        sa.Column("answered_by", sa.String(length=100), nullable=True),
        sa.Column("answered_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("case_id"),
    )


def downgrade() -> None:
    op.drop_table("review_samples")
    with op.batch_alter_table("shadow_decisions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_shadow_decisions_draft_id"))
    op.drop_table("shadow_decisions")
    with op.batch_alter_table("policy_backtests", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_policy_backtests_content_hash"))
    op.drop_table("policy_backtests")
    op.drop_table("policy_drafts")
    with op.batch_alter_table("control", schema=None) as batch_op:
        batch_op.drop_column("publish_needs_second_lead")
        batch_op.drop_column("review_sample_rate")
        batch_op.drop_column("shadow_started_at")
        batch_op.drop_column("shadow_draft")
