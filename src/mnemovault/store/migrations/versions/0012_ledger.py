"""The erasure ledger records what contributors removed (issue 21).

Revision ID: 0012_ledger
Revises: 0011_visibility
Create Date: 2026-12-01

* ``erasure_ledger.contributed``: the ids each erase contributor removed that are not
  memories, by kind (``{"procedure_runs": ["<uuid>", ...]}``: a subject's runs on other
  owners' procedures, whose feedback lives on the run row). A backup restore brings them
  back with everything else; the reapplication of the ledger
  (:mod:`mnemovault.subjects.ledger`) removes them again by id and adjusts the counters
  they were counted in. Rows written before this revision have ``{}``.

``erasure_ledger`` is distributed by ``tenant_id`` on Citus; adding a column propagates.
"""

from alembic import op

revision = "0012_ledger"
down_revision = "0011_visibility"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE erasure_ledger "
               "ADD COLUMN contributed jsonb NOT NULL DEFAULT '{}'::jsonb")


def downgrade() -> None:
    op.execute("ALTER TABLE erasure_ledger DROP COLUMN IF EXISTS contributed")
