"""The other free-text columns sealed too (issue 21, item 1): provenance, procedure texts,
run provenance.

Revision ID: 0017_sealed_provenance
Revises: 0016_stat_deltas
Create Date: 2026-12-02

- ``memories.provenance_sealed``: the writer's provenance (source, agent, run id, source
  id, tags, extra keys) as JSON sealed under the row's ``key_id``; the clear
  ``provenance`` column then keeps only what the product sets and SQL reads (the review
  gate's ``review`` and ``captured_by``, the sanitiser's ``injection_flags``) and the
  keyed hashes of ``tags`` and ``source_id`` that filters compare
  (:mod:`mnemovault.pii.sealing`).
- ``procedures.sealed``: the procedure's name, intent and steps as one sealed JSON
  document under its memory row's key (the clear columns are written empty).
- ``procedure_runs.key_id`` / ``provenance_sealed``: a run's provenance under the key of
  the run's own owner (its scope and subject), so erasing the subject who ran another
  subject's procedure shreds the run's provenance too.

Rows written before this revision are sealed by ``mnemovault db seal`` (every start runs
it); the partial indexes find them without a scan.
"""

from alembic import op

revision = "0017_sealed_provenance"
down_revision = "0016_stat_deltas"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE memories ADD COLUMN provenance_sealed bytea;
        ALTER TABLE procedures ADD COLUMN sealed bytea;
        ALTER TABLE procedure_runs ADD COLUMN key_id uuid;
        ALTER TABLE procedure_runs ADD COLUMN provenance_sealed bytea;
        CREATE INDEX memories_provenance_unsealed ON memories (tenant_id, id)
            WHERE provenance_sealed IS NULL;
        CREATE INDEX procedures_unsealed ON procedures (tenant_id, memory_id)
            WHERE sealed IS NULL;
        CREATE INDEX procedure_runs_unsealed ON procedure_runs (tenant_id, id)
            WHERE key_id IS NULL;
        CREATE INDEX procedure_runs_key_id ON procedure_runs (tenant_id, key_id)
            WHERE key_id IS NOT NULL;
        """
    )


def downgrade() -> None:
    op.execute(
        """
        DROP INDEX IF EXISTS procedure_runs_key_id;
        DROP INDEX IF EXISTS procedure_runs_unsealed;
        DROP INDEX IF EXISTS procedures_unsealed;
        DROP INDEX IF EXISTS memories_provenance_unsealed;
        ALTER TABLE procedure_runs DROP COLUMN provenance_sealed;
        ALTER TABLE procedure_runs DROP COLUMN key_id;
        ALTER TABLE procedures DROP COLUMN sealed;
        ALTER TABLE memories DROP COLUMN provenance_sealed;
        """
    )
