"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-30 04:12:47.059848
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from refund_desk.storage.types import UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("revoked_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("key_hash"),
    )
    op.create_table(
        "audit_head",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "audit_records",
        sa.Column("seq", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.Column("case_id", sa.String(length=40), nullable=True),
        sa.Column("correlation_id", sa.String(length=40), nullable=True),
        sa.Column("actor_kind", sa.String(length=20), nullable=False),
        sa.Column("actor_id", sa.String(length=100), nullable=True),
        sa.Column("action", sa.String(length=60), nullable=False),
        sa.Column("policy_version", sa.Integer(), nullable=True),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("prev_hash", sa.String(length=64), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("seq"),
    )
    with op.batch_alter_table("audit_records", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_audit_records_case_id"), ["case_id"], unique=False)

    op.create_table(
        "control",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("active_version", sa.Integer(), nullable=True),
        sa.Column("mode", sa.String(length=20), nullable=False),
        sa.Column("paused", sa.Boolean(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=40), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("dedupe_key", sa.String(length=200), nullable=True),
        sa.Column("status", sa.String(length=10), nullable=False),
        sa.Column("due_at", UTCDateTime(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("lease_owner", sa.String(length=80), nullable=True),
        sa.Column("lease_expires_at", UTCDateTime(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("finished_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("dedupe_key"),
    )
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.create_index("ix_jobs_due", ["status", "due_at"], unique=False)

    op.create_table(
        "payments",
        sa.Column("id", sa.String(length=100), nullable=False),
        sa.Column("processor", sa.String(length=20), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("amount", sa.BigInteger(), nullable=False),
        sa.Column("refunded", sa.BigInteger(), nullable=False),
        sa.Column("email_hash", sa.String(length=64), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("seen_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("payments", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_payments_email_hash"), ["email_hash"], unique=False)

    op.create_table(
        "policy_versions",
        sa.Column("version", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("policy_name", sa.String(length=100), nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("published_by", sa.String(length=100), nullable=False),
        sa.Column("published_at", UTCDateTime(), nullable=False),
        sa.Column("note", sa.String(), nullable=True),
        sa.PrimaryKeyConstraint("version"),
    )
    op.create_table(
        "sandbox_faults",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("mode", sa.String(length=30), nullable=False),
        sa.Column("remaining", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "sandbox_payments",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("amount", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("email", sa.String(length=320), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=True),
        sa.Column("chargebacks", sa.Integer(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "cases",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("source", sa.String(length=20), nullable=False),
        sa.Column("external_id", sa.String(length=200), nullable=True),
        sa.Column("correlation_id", sa.String(length=40), nullable=False),
        sa.Column("payment_id", sa.String(length=100), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("requested_amount", sa.BigInteger(), nullable=True),
        sa.Column("amount", sa.BigInteger(), nullable=False),
        sa.Column("amount_source", sa.String(length=30), nullable=False),
        sa.Column("reason", sa.String(length=30), nullable=True),
        sa.Column("reason_source", sa.String(length=30), nullable=True),
        sa.Column("email_enc", sa.Text(), nullable=False),
        sa.Column("email_hash", sa.String(length=64), nullable=False),
        sa.Column("name_enc", sa.Text(), nullable=True),
        sa.Column("message_enc", sa.Text(), nullable=True),
        sa.Column("customer_verified", sa.Boolean(), nullable=False),
        sa.Column("possible_duplicate", sa.Boolean(), nullable=False),
        sa.Column("duplicate_of", sa.String(length=40), nullable=True),
        sa.Column("policy_version", sa.Integer(), nullable=True),
        sa.Column("facts", sa.JSON(), nullable=True),
        sa.Column("advice", sa.JSON(), nullable=True),
        sa.Column("decision", sa.JSON(), nullable=True),
        sa.Column("callback_url", sa.Text(), nullable=True),
        sa.Column("customer_message", sa.Text(), nullable=True),
        sa.Column("park_reason", sa.Text(), nullable=True),
        sa.Column("escalation_level", sa.Integer(), nullable=False),
        sa.Column("approval_round", sa.Integer(), nullable=False),
        sa.Column("requested_by", sa.String(length=100), nullable=True),
        sa.Column("sla_due_at", UTCDateTime(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["payment_id"],
            ["payments.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("cases", schema=None) as batch_op:
        batch_op.create_index("ix_cases_email_created", ["email_hash", "created_at"], unique=False)
        batch_op.create_index("ix_cases_payment_status", ["payment_id", "status"], unique=False)
        batch_op.create_index(batch_op.f("ix_cases_status"), ["status"], unique=False)

    op.create_table(
        "sandbox_refunds",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("payment_id", sa.String(length=40), nullable=False),
        sa.Column("amount", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("idempotency_key", sa.String(length=200), nullable=True),
        sa.Column("meta", sa.JSON(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["payment_id"],
            ["sandbox_payments.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("sandbox_refunds", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_sandbox_refunds_payment_id"), ["payment_id"], unique=False
        )

    op.create_table(
        "approvals",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("case_id", sa.String(length=40), nullable=False),
        sa.Column("round", sa.Integer(), nullable=False),
        sa.Column("approver", sa.String(length=100), nullable=False),
        sa.Column("decision", sa.String(length=20), nullable=False),
        sa.Column("amount", sa.BigInteger(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("token_nonce", sa.String(length=64), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["case_id"],
            ["cases.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("case_id", "round", "approver", "decision"),
        sa.UniqueConstraint("token_nonce"),
    )
    with op.batch_alter_table("approvals", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_approvals_case_id"), ["case_id"], unique=False)

    op.create_table(
        "executions",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("case_id", sa.String(length=40), nullable=False),
        sa.Column("payment_id", sa.String(length=100), nullable=False),
        sa.Column("amount", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("idempotency_key", sa.String(length=80), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("automatic", sa.Boolean(), nullable=False),
        sa.Column("basis", sa.String(length=200), nullable=False),
        sa.Column("processor_refund_id", sa.String(length=100), nullable=True),
        sa.Column("processor_status", sa.String(length=30), nullable=True),
        sa.Column("error_code", sa.String(length=60), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("finished_at", UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["case_id"],
            ["cases.id"],
        ),
        sa.ForeignKeyConstraint(
            ["payment_id"],
            ["payments.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("idempotency_key"),
    )
    with op.batch_alter_table("executions", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_executions_case_id"), ["case_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_executions_payment_id"), ["payment_id"], unique=False)

    op.create_table(
        "intake_keys",
        sa.Column("api_key_id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("body_hash", sa.String(length=64), nullable=False),
        sa.Column("case_id", sa.String(length=40), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["api_key_id"],
            ["api_keys.id"],
        ),
        sa.ForeignKeyConstraint(
            ["case_id"],
            ["cases.id"],
        ),
        sa.PrimaryKeyConstraint("api_key_id", "key"),
    )

    op.create_table(
        "slack_messages",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("case_id", sa.String(length=40), nullable=True),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("channel", sa.String(length=40), nullable=False),
        sa.Column("ts", sa.String(length=40), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("slack_messages", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_slack_messages_case_id"), ["case_id"], unique=False)

    _seed_rows()
    _protect_audit_records()


def downgrade() -> None:
    _unprotect_audit_records()
    op.drop_table("slack_messages")
    op.drop_table("intake_keys")
    with op.batch_alter_table("executions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_executions_payment_id"))
        batch_op.drop_index(batch_op.f("ix_executions_case_id"))

    op.drop_table("executions")
    with op.batch_alter_table("approvals", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_approvals_case_id"))

    op.drop_table("approvals")
    with op.batch_alter_table("sandbox_refunds", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_sandbox_refunds_payment_id"))

    op.drop_table("sandbox_refunds")
    with op.batch_alter_table("cases", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_cases_status"))
        batch_op.drop_index("ix_cases_payment_status")
        batch_op.drop_index("ix_cases_email_created")

    op.drop_table("cases")
    op.drop_table("sandbox_payments")
    op.drop_table("sandbox_faults")
    op.drop_table("policy_versions")
    with op.batch_alter_table("payments", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_payments_email_hash"))

    op.drop_table("payments")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_jobs_due")

    op.drop_table("jobs")
    op.drop_table("control")
    with op.batch_alter_table("audit_records", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_audit_records_case_id"))

    op.drop_table("audit_records")
    op.drop_table("audit_head")
    op.drop_table("api_keys")


def _seed_rows() -> None:
    op.execute("INSERT INTO audit_head (id, seq, hash) VALUES (1, 0, '" + "0" * 64 + "')")
    op.execute(
        "INSERT INTO control (id, mode, paused, updated_at) "
        "VALUES (1, 'supervised', false, CURRENT_TIMESTAMP)"
    )
    op.execute("INSERT INTO sandbox_faults (id, mode) VALUES (1, 'none')")


def _protect_audit_records() -> None:
    """The audit trail is append-only: the database itself refuses edits, deletes, truncation."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            """
            CREATE FUNCTION refund_desk_audit_append_only() RETURNS trigger AS $$
            BEGIN
                RAISE EXCEPTION 'audit_records is append-only: % refused', TG_OP
                    USING ERRCODE = 'insufficient_privilege';
            END;
            $$ LANGUAGE plpgsql
            """
        )
        op.execute(
            "CREATE TRIGGER audit_records_no_update_delete BEFORE UPDATE OR DELETE "
            "ON audit_records FOR EACH ROW EXECUTE FUNCTION refund_desk_audit_append_only()"
        )
        op.execute(
            "CREATE TRIGGER audit_records_no_truncate BEFORE TRUNCATE "
            "ON audit_records FOR EACH STATEMENT EXECUTE FUNCTION refund_desk_audit_append_only()"
        )
    else:  # SQLite has no TRUNCATE; DELETE without WHERE fires the row trigger
        for op_name in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER audit_records_no_{op_name.lower()} BEFORE {op_name} "
                f"ON audit_records BEGIN SELECT RAISE(ABORT, "
                f"'audit_records is append-only: {op_name} refused'); END"
            )


def _unprotect_audit_records() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS audit_records_no_truncate ON audit_records")
        op.execute("DROP TRIGGER IF EXISTS audit_records_no_update_delete ON audit_records")
        op.execute("DROP FUNCTION IF EXISTS refund_desk_audit_append_only()")
    else:
        op.execute("DROP TRIGGER IF EXISTS audit_records_no_update")
        op.execute("DROP TRIGGER IF EXISTS audit_records_no_delete")
