"""Recall's conversation context keyed on the conversation (issue 27, item 1).

Revision ID: 0021_conversation_order
Revises: 0020_librarian
Create Date: 2026-12-02

``memories.conversation``: the keyed hash of the row's provenance ``run_id`` (the clear
provenance column holds it, :func:`mnemovault.pii.sealing.run_id_hash`), generated from
that column; NULL for a row without one. ``memories_conversation``: a memory's place in its
conversation, ``(scope, conversation, created_at, id)``. The context stage
(:mod:`mnemovault.store.neighbours`) walks it from a recalled turn to the turns just before
and after it in the same conversation: one index range each way, however many other
memories share the scope or the write time. A stored column and not an expression index
over ``provenance ->> 'run_id'``: under row-level security the planner keeps quals with
functions that are not leakproof (``->>``) out of the index conditions, as it keeps ``@@``
off the GIN index (0010); equality on a text column is leakproof.

Rows sealed before this revision carry no run-id hash (their sealed provenance would have
to be opened to compute it): they take no part in the context stage.
"""

from alembic import op

revision = "0021_conversation_order"
down_revision = "0020_librarian"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE memories ADD COLUMN conversation text
            GENERATED ALWAYS AS (provenance ->> 'run_id') STORED;
        CREATE INDEX memories_conversation ON memories
            (tenant_id, scope, conversation, created_at, id)
            WHERE conversation IS NOT NULL;
        """
    )


def downgrade() -> None:
    op.execute("""
        DROP INDEX IF EXISTS memories_conversation;
        ALTER TABLE memories DROP COLUMN conversation;
        """)
