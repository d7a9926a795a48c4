"""How each API key was made (issue 22): ``api_keys.origin``.

Revision ID: 0013_edge
Revises: 0012_ledger
Create Date: 2026-12-02

``issued`` for a key made by an operator (``mnemovault keys create``) or by a holder of
``keys:manage`` (``POST /v1/keys``), ``self_registered`` for one an agent made for itself
(``POST /v1/agents/register``, :mod:`mnemovault.agents`). Every key made before this
revision was issued. Owners see it in ``keys list``; the edge gives self-registered keys
their own rate budget and a quota on stored memories.
"""

from alembic import op

revision = "0013_edge"
down_revision = "0012_ledger"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE api_keys ADD COLUMN origin text NOT NULL DEFAULT 'issued'
          CHECK (origin IN ('issued', 'self_registered'));
        """
    )


def downgrade() -> None:
    op.execute("ALTER TABLE api_keys DROP COLUMN origin")
