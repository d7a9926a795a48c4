"""Recall's conversation context keyed on the conversation (issue 27, item 1).

Revision ID: 0021_conversation_order
Revises: 0020_librarian
Create Date: 2026-12-02

``memories_conversation``: a memory's place in its conversation, ``(scope, run id,
created_at, id)``, for the rows whose provenance names a ``run_id`` (the clear column holds
its keyed hash, :func:`mnemovault.pii.sealing.run_id_hash`). The context stage
(:mod:`mnemovault.store.neighbours`) walks it from a recalled turn to the turns just before
and after it in the same conversation: one index range each way, however many other
memories share the scope or the write time.

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
        CREATE INDEX memories_conversation ON memories
            (tenant_id, scope, (provenance ->> 'run_id'), created_at, id)
            WHERE provenance ? 'run_id';
        """
    )


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS memories_conversation;")
