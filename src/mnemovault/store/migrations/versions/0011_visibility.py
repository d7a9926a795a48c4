"""The visibility rule's storage (issue 19): quoted placeholders, and a pending version that
waits beside the approved one.

Revision ID: 0011_visibility
Revises: 0010_postings
Create Date: 2026-12-01

* ``graph_node_support.quoted``: true when the memory holds the node's placeholder only
  because its writer typed (quoted) the placeholder, false when the memory's text held the
  value itself and the detectors replaced it. A key limited to a scope or subject reveals a
  value only through a record within its limits that carried the value
  (:mod:`mnemovault.visibility`): quoting a placeholder seen elsewhere grants nothing. Rows
  written before this revision are taken as carrying their values (``false``), which is
  what every path assumed until now.
* ``memories_live_key`` covered every row that is not superseded, so a held (pending)
  version had to displace the approved one the moment it was written. Now the key has at
  most one ``active`` row and at most one ``pending_review`` row: the approved version
  stays current until its successor is approved (:mod:`mnemovault.governance.review`).
"""

from alembic import op

revision = "0011_visibility"
down_revision = "0010_postings"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE graph_node_support ADD COLUMN quoted boolean NOT NULL DEFAULT false;
        DROP INDEX memories_live_key;
        CREATE UNIQUE INDEX memories_live_key ON memories (tenant_id, scope, key)
          WHERE key IS NOT NULL AND status = 'active';
        CREATE UNIQUE INDEX memories_pending_key ON memories (tenant_id, scope, key)
          WHERE key IS NOT NULL AND status = 'pending_review';
        """
    )


def downgrade() -> None:
    op.execute(
        """
        DROP INDEX memories_pending_key;
        DROP INDEX memories_live_key;
        CREATE UNIQUE INDEX memories_live_key ON memories (tenant_id, scope, key)
          WHERE key IS NOT NULL AND status <> 'superseded';
        ALTER TABLE graph_node_support DROP COLUMN quoted;
        """
    )
