"""Subject rights: the erasure ledger and the subject listing index (issue 10).

Revision ID: 0006_subjects
Revises: 0005_signed_tenant
Create Date: 2026-12-01

* ``erasure_ledger``: one row per erase, forget, shred, rectification or reapply, written
  in the transaction of the change with its audit row (keyed by that row's ``audit_seq``,
  which is ordered per tenant by the audit head lock, so a reader that follows
  ``audit_seq`` never skips a row that commits late). Ids, placeholders and keyed
  fingerprints only, never content (``rectified``: memories whose old content a
  rectification replaced; a reapply reports them, it cannot redo the correction).
  Append-only for the application role. After commit each row is also appended to a
  JSON Lines file outside the database (:mod:`mnemovault.subjects.ledger`): a backup
  restore rolls this table back, the file stays, and ``mnemovault reapply-erasures``
  removes again what it lists.
  No foreign key to ``tenants``: the ledger records erasures, it does not need the tenant
  row to exist (a tenant's hard delete removes its rows table by table).
* ``memories_scope_subject``: a subject's memories in a scope in id order (the keyset
  listing of :mod:`mnemovault.subjects.access` and the erase's resolve step).
"""

from alembic import context, op

from mnemovault.store.migrations.tenancy import tenant_table

revision = "0006_subjects"
down_revision = "0005_signed_tenant"
branch_labels = None
depends_on = None


def upgrade() -> None:
    role = context.config.attributes.get("app_role", "mnemovault_app")
    if not role.replace("_", "").isalnum():
        raise ValueError("app_role: must be letters, digits and underscores")
    op.execute(
        """
        CREATE TABLE erasure_ledger (
          tenant_id    text NOT NULL,
          audit_seq    bigint NOT NULL,
          id           uuid NOT NULL,
          kind         text NOT NULL
                       CHECK (kind IN ('erase', 'forget', 'shred', 'rectify', 'reapply')),
          at           timestamptz NOT NULL DEFAULT now(),
          request_id   text,
          subject_fp   text,
          scope_fp     text,
          memory_ids   uuid[] NOT NULL DEFAULT '{}',
          placeholders text[] NOT NULL DEFAULT '{}',
          rectified    uuid[] NOT NULL DEFAULT '{}',
          PRIMARY KEY (tenant_id, audit_seq)
        );
        CREATE INDEX memories_scope_subject ON memories (tenant_id, scope, subject_id, id);
        """
    )
    tenant_table(op, "erasure_ledger", role, "SELECT, INSERT", signed=True)


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS memories_scope_subject")
    op.execute("DROP TABLE IF EXISTS erasure_ledger")
