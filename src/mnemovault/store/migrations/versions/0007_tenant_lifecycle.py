"""Tenant lifecycle: export jobs, soft delete with a grace period (issue 10).

Revision ID: 0007_tenant_lifecycle
Revises: 0006_subjects
Create Date: 2026-12-01

* ``tenants.deleted_at`` / ``delete_after`` (revision 0001) hold a soft delete; nothing new.
* ``tenant_exports``: one row per export job (state, progress, destination, the manifest's
  SHA-256), under row-level security like every tenant table.
* ``outbox.claimed_until`` / ``last_error``: a worker claims an event for a lease (so a
  crashed worker's event is taken up again after it) and records why an attempt failed.
* The reserved **system tenant** ``_system``: its audit chain holds the rows that outlive a
  tenant (one ``TENANT_PURGE`` row per hard-deleted tenant: its id, the row counts and the
  last checkpoint of its chain). The name is outside the tenant id rule the application
  enforces (no underscore), so no API key, token or caller can ever name it; only the
  ``tenants`` CHECK admits it, here.
"""

from alembic import context, op

from mnemovault.store.migrations.tenancy import tenant_table

revision = "0007_tenant_lifecycle"
down_revision = "0006_subjects"
branch_labels = None
depends_on = None

TENANT_RULE = "tenant_id ~ '^[a-z0-9][a-z0-9-]{0,62}$'"


def upgrade() -> None:
    role = context.config.attributes.get("app_role", "mnemovault_app")
    if not role.replace("_", "").isalnum():
        raise ValueError("app_role: must be letters, digits and underscores")
    op.execute(f"""
        ALTER TABLE tenants DROP CONSTRAINT IF EXISTS tenants_tenant_id_check;
        ALTER TABLE tenants ADD CONSTRAINT tenants_tenant_id_check
          CHECK ({TENANT_RULE} OR tenant_id = '_system');
        INSERT INTO tenants (tenant_id) VALUES ('_system') ON CONFLICT (tenant_id) DO NOTHING;

        ALTER TABLE outbox
          ADD COLUMN claimed_until timestamptz,
          ADD COLUMN last_error text;

        CREATE TABLE tenant_exports (
          tenant_id       text NOT NULL REFERENCES tenants (tenant_id),
          job_id          uuid NOT NULL,
          state           text NOT NULL DEFAULT 'queued'
                          CHECK (state IN ('queued', 'running', 'done', 'failed')),
          destination     text NOT NULL,
          requested_by    text,
          attempts        integer NOT NULL DEFAULT 0,
          files_done      integer NOT NULL DEFAULT 0,
          files_total     integer NOT NULL DEFAULT 0,
          rows_done       bigint NOT NULL DEFAULT 0,
          rows_total      bigint NOT NULL DEFAULT 0,
          manifest_sha256 text,
          error           text,
          created_at      timestamptz NOT NULL DEFAULT now(),
          started_at      timestamptz,
          finished_at     timestamptz,
          PRIMARY KEY (tenant_id, job_id)
        );
        """)
    tenant_table(op, "tenant_exports", role, "SELECT, INSERT, UPDATE", signed=True)


def downgrade() -> None:
    for table in ("audit_checkpoints", "audit_nodes", "audit_log", "audit_heads"):
        op.execute(f"DELETE FROM {table} WHERE tenant_id = '_system'")
    op.execute("""
        DROP TABLE IF EXISTS tenant_exports;
        ALTER TABLE outbox DROP COLUMN IF EXISTS claimed_until,
                           DROP COLUMN IF EXISTS last_error;
        DELETE FROM tenants WHERE tenant_id = '_system';
        ALTER TABLE tenants DROP CONSTRAINT IF EXISTS tenants_tenant_id_check;
        """)
    op.execute(f"ALTER TABLE tenants ADD CONSTRAINT tenants_tenant_id_check CHECK ({TENANT_RULE})")
