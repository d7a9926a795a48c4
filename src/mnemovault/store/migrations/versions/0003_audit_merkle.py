"""Audit log: Merkle state in the head row, stored tree nodes, signed checkpoints.

Revision ID: 0003_audit
Revises: 0002
Create Date: 2026-11-30

RFC 9162 tree per tenant chain: leaf ``seq`` has index ``seq - 1``. The head row keeps the
compact range (the perfect subtree roots, largest first, concatenated) so appending and
checkpointing need no scan; every perfect node completed by an append is stored in
``audit_nodes`` so inclusion and consistency proofs read O(log n) rows.
"""

from alembic import context, op

from mnemovault.store.migrations.tenancy import tenant_table

revision = "0003_audit"
down_revision = "0002"
branch_labels = None
depends_on = None

TABLES = ("audit_nodes", "audit_checkpoints")


def upgrade() -> None:
    role = context.config.attributes.get("app_role", "mnemovault_app")
    op.execute(
        """
        ALTER TABLE audit_heads
          ADD COLUMN peaks bytea NOT NULL DEFAULT ''::bytea,
          ADD COLUMN checkpoint_size bigint NOT NULL DEFAULT 0,
          ADD COLUMN checkpoint_at timestamptz;

        CREATE TABLE audit_nodes (
          tenant_id text NOT NULL REFERENCES tenants (tenant_id),
          level     smallint NOT NULL,
          idx       bigint NOT NULL,
          hash      bytea NOT NULL,
          PRIMARY KEY (tenant_id, level, idx)
        );

        CREATE TABLE audit_checkpoints (
          tenant_id  text NOT NULL REFERENCES tenants (tenant_id),
          size       bigint NOT NULL,
          root       bytea NOT NULL,
          note       text NOT NULL,
          created_at timestamptz NOT NULL DEFAULT now(),
          PRIMARY KEY (tenant_id, size)
        );
        """
    )
    _backfill()
    for table in TABLES:
        tenant_table(op, table, role, "SELECT, INSERT")


def _backfill() -> None:
    """Chains written before this revision: rebuild their Merkle nodes and compact range
    from the stored rows (checkpoints follow on the next append)."""
    from sqlalchemy import text

    from mnemovault.audit.merkle import CompactRange, leaf_hash

    bind = op.get_bind()
    heads = bind.execute(text("SELECT tenant_id FROM audit_heads WHERE seq > 0")).fetchall()
    for (tenant,) in heads:
        cr = CompactRange()
        nodes = []
        rows = bind.execute(text("SELECT row_bytes FROM audit_log WHERE tenant_id = :t "
                                 "ORDER BY seq"), {"t": tenant})
        for (row_bytes,) in rows:
            nodes += [{"t": tenant, "l": lv, "i": ix, "h": h}
                      for lv, ix, h in cr.append(leaf_hash(bytes(row_bytes)))]
        if nodes:
            bind.execute(text("INSERT INTO audit_nodes (tenant_id, level, idx, hash) "
                              "VALUES (:t, :l, :i, :h)"), nodes)
        bind.execute(text("UPDATE audit_heads SET peaks = :p WHERE tenant_id = :t"),
                     {"p": b"".join(cr.peaks), "t": tenant})


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS audit_checkpoints")
    op.execute("DROP TABLE IF EXISTS audit_nodes")
    op.execute("ALTER TABLE audit_heads DROP COLUMN peaks, DROP COLUMN checkpoint_size, "
               "DROP COLUMN checkpoint_at")
