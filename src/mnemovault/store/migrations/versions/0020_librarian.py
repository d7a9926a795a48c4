"""The librarian's rank of consolidated facts (issue 23, items 1 and 3).

Revision ID: 0020_librarian
Revises: 0019_valid_time
Create Date: 2026-12-02

``memories.rank_boost``: a term recall adds to a memory's fused score
(:func:`mnemovault.recall.ranking.fuse`). 0 for every memory but the librarian's facts
(:mod:`mnemovault.librarian`): a fact gets ``librarian_fact_boost`` when it is written, so it
ranks above the episodes it consolidates, and ``librarian_faded_boost`` once nothing has
recalled or woken it for ``librarian_fade_after_days`` (fading, :mod:`mnemovault.librarian.
fade`). A ranking hint, never a visibility rule: archived, superseded and pending records
stay out of recall whatever their boost. The index finds a tenant's consolidated facts.
"""

from alembic import op

revision = "0020_librarian"
down_revision = "0019_valid_time"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE memories ADD COLUMN rank_boost real NOT NULL DEFAULT 0;
        CREATE INDEX memories_librarian ON memories (tenant_id, scope)
            WHERE type = 'fact' AND provenance ? 'librarian';
        """
    )


def downgrade() -> None:
    op.execute(
        """
        DROP INDEX IF EXISTS memories_librarian;
        ALTER TABLE memories DROP COLUMN rank_boost;
        """
    )
