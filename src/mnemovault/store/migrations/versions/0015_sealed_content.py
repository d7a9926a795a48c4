"""Content sealed under per-subject keys that live outside the database (issue 21, item 1).

Revision ID: 0015_sealed_content
Revises: 0014_hashed_terms
Create Date: 2026-12-02

``memories.key_id``: the content key (:mod:`mnemovault.pii.keystore`, outside the
database) that seals the row's ``content_sealed`` (AES-256-GCM, AAD binding tenant, row
id and column: :mod:`mnemovault.pii.sealing`). NULL for rows written before this revision
until ``mnemovault db seal`` (run at every start) has sealed them. A sealed row's ``key``
(the upsert key, which SQL compares) holds its keyed hash (``h1:<32 hex>``) and
``key_sealed`` the ciphertext that is shown. The index finds the rows
under a destroyed key (an erase interrupted before its commit, or a restored backup).
"""

from alembic import op

revision = "0015_sealed_content"
down_revision = "0014_hashed_terms"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE memories ADD COLUMN key_id uuid;
        ALTER TABLE memories ADD COLUMN content_sealed bytea;
        ALTER TABLE memories ADD COLUMN key_sealed bytea;
        CREATE INDEX memories_key_id ON memories (tenant_id, key_id) WHERE key_id IS NOT NULL;
        """
    )


def downgrade() -> None:
    op.execute(
        """
        DROP INDEX IF EXISTS memories_key_id;
        ALTER TABLE memories DROP COLUMN key_sealed;
        ALTER TABLE memories DROP COLUMN content_sealed;
        ALTER TABLE memories DROP COLUMN key_id;
        """
    )
