"""Lexical search without plaintext (issue 21 item 2): ``memories.tsv`` and
``tsv_length`` are written by the application, as keyed hashes of the terms.

Revision ID: 0014_hashed_terms
Revises: 0013_edge
Create Date: 2026-12-02

Until this revision ``tsv`` was ``GENERATED ALWAYS AS (to_tsvector('english', content))``
and ``tsv_length`` its length: the heap, the GIN index ``memories_tsv``, the postings
(0010) and the statistics (0009), all copied from ``tsv``, held every word of every
memory. From here the application computes them (:mod:`mnemovault.recall.terms`: the same
parser, stemming and stop words, in Python) and writes each lexeme as a keyed hash under
the tenant's term key: the columns are plain (``DROP EXPRESSION`` keeps each row's value)
and ``NOT NULL``, so a write path that forgets them fails instead of indexing nothing.

``terms_keyed``: whether the row's ``tsv`` holds keyed hashes. Rows already there keep
their plain lexemes (false) until the re-index (:mod:`mnemovault.recall.reindex`, run by
every start before serving, and by ``mnemovault db reindex-terms``) rewrites them in
committed batches; the column's default is then true, for every row written from now on.
``memories_terms_plain`` finds the rows left to do.

The triggers of 0009 and 0010 fire on an UPDATE that changes ``content`` (and status,
archived, scope); the application writes ``tsv`` in the same statement, so they see the
new terms. The re-index changes ``tsv`` alone: :data:`TRIGGERS` runs the same update
functions for such an UPDATE (only when none of the other columns changed, so a row is
never counted twice), and the statistics and postings follow the rewrite, batch by batch.

The GIN index on ``tsv`` stays: it now holds keyed hashes only, no word, and it still
serves the owner's and the filtered queries that plan ``tsv @@ tsquery`` (the
application role under row-level security cannot use it: 0010's docstring).
"""

from alembic import op

from mnemovault.store.migrations.triggers import TriggerSet

revision = "0014_hashed_terms"
down_revision = "0013_edge"
branch_labels = None
depends_on = None

_ONLY_TSV = """
         WHEN (OLD.tsv IS DISTINCT FROM NEW.tsv
               AND OLD.status IS NOT DISTINCT FROM NEW.status
               AND OLD.archived IS NOT DISTINCT FROM NEW.archived
               AND OLD.scope IS NOT DISTINCT FROM NEW.scope
               AND OLD.content IS NOT DISTINCT FROM NEW.content)"""

# The functions are 0009's and 0010's (installed before these on Citus too: revision-file
# order); nothing to recount: the update functions keep the targets exact. Two sets, one
# per target group, as in 0009 and 0010.
TRIGGERS = (
    TriggerSet(
        table="memories",
        targets=("lexical_scope_stats", "lexical_df"),
        functions=(),
        triggers=(f"""CREATE TRIGGER memories_terms_lexical AFTER UPDATE OF tsv ON memories
         FOR EACH ROW{_ONLY_TSV}
         EXECUTE FUNCTION mv_lexical_update()""",),
        backfill=(),
    ),
    TriggerSet(
        table="memories",
        targets=("lexical_postings",),
        functions=(),
        triggers=(f"""CREATE TRIGGER memories_terms_postings AFTER UPDATE OF tsv ON memories
         FOR EACH ROW{_ONLY_TSV}
         EXECUTE FUNCTION mv_postings_update()""",),
        backfill=(),
    ),
)


def upgrade() -> None:
    op.execute("""
        ALTER TABLE memories ALTER COLUMN tsv DROP EXPRESSION;
        ALTER TABLE memories ALTER COLUMN tsv_length DROP EXPRESSION;
        ALTER TABLE memories ALTER COLUMN tsv SET NOT NULL;
        ALTER TABLE memories ALTER COLUMN tsv_length SET NOT NULL;
        ALTER TABLE memories ADD COLUMN terms_keyed boolean NOT NULL DEFAULT false;
        ALTER TABLE memories ALTER COLUMN terms_keyed SET DEFAULT true;
        CREATE INDEX memories_terms_plain ON memories (tenant_id, id) WHERE NOT terms_keyed;
    """)
    if op.get_bind().exec_driver_sql(
            "SELECT 1 FROM pg_extension WHERE extname = 'citus'").first() is not None:
        return  # mnemovault.store.citus.distribute installs the triggers on the shards
    for triggers in TRIGGERS:
        for statement in triggers.triggers:
            op.execute(statement)


def downgrade() -> None:
    op.execute("""
        DROP TRIGGER IF EXISTS memories_terms_lexical ON memories;
        DROP TRIGGER IF EXISTS memories_terms_postings ON memories;
        DROP INDEX IF EXISTS memories_terms_plain;
        ALTER TABLE memories DROP COLUMN terms_keyed;
        ALTER TABLE memories DROP COLUMN tsv_length;
        ALTER TABLE memories DROP COLUMN tsv;
        ALTER TABLE memories ADD COLUMN tsv tsvector
          GENERATED ALWAYS AS (to_tsvector('english', content)) STORED;
        ALTER TABLE memories ADD COLUMN tsv_length integer
          GENERATED ALWAYS AS (length(to_tsvector('english', content))) STORED;
        CREATE INDEX memories_tsv ON memories USING gin (tsv);
    """)
