"""Postings of the live memories, for an exact BM25 top-n that reads few rows (issue 13).

Revision ID: 0010_postings
Revises: 0009_lexical_stats
Create Date: 2026-12-01

Why a table: under row-level security PostgreSQL may use an index only for leakproof
operators, and the full-text match (``tsv @@ tsquery``) is not one, so the GIN index on
``memories.tsv`` is never used by the application role: every lexical query reads the
whole scope (a sequential scan of 100k rows, about 70 ms, plus scoring the matches). A
B-tree on plain columns compared with ``=`` (leakproof) is usable.

``lexical_postings`` (tenant, scope, lexeme, tf, dl, memory_id): one row per lexeme of
each live memory (``status = 'active' AND NOT archived``, what recall searches by
default), ``tf`` its position count and ``dl`` the memory's ``tsv_length``, exactly the
inputs of :func:`mnemovault.store.search.text_candidates`'s BM25. Two indexes:

* ``(tenant_id, scope, lexeme, tf DESC, dl, memory_id)``: a term's postings in decreasing
  contribution for each term frequency (fixed tf, growing dl), covering, so a term's
  postings are read by an index-only scan and the first row of each tf group gives the
  term's exact best contribution (the MaxScore bounds);
* the primary key ``(tenant_id, memory_id, lexeme)``, covering ``tf`` and ``dl``: one
  memory's postings in one index-only probe (the exact score of a candidate; the deletes
  of the triggers).

Triggers on ``memories`` keep it, like migration 0009's statistics (whose rules they
follow): one ``INSERT ... SELECT`` per inserting statement and one ``DELETE ... USING``
per deleting statement (transition tables), a row-level trigger for the UPDATEs that
change what counts (status, archived, scope, content; access statistics and pins do not
fire it), and TRUNCATE empties it. They write only the postings of the memories the
statement changes, keys no other writer holds, so they take no lock on shared rows (0009
locks the scope row, then lexemes, in order; nothing here waits on those).

Citus: as in 0009, on a server with the ``citus`` extension this revision creates the
table and the functions but no triggers (Citus refuses to distribute a table with triggers).
:data:`TRIGGERS` (:mod:`mnemovault.store.migrations.triggers`) defines them once: after
distributing the tables, :func:`mnemovault.store.citus.distribute` installs them on the
shards, in their Citus form (the same statements, run on the co-located shard of
``lexical_postings``), and fills the table from the memories there are (``backfill``), in
one transaction. The lexical query then reads the postings on Citus too, each query routed
to the tenant's one shard.
"""

from alembic import context, op

from mnemovault.store.migrations.tenancy import tenant_table
from mnemovault.store.migrations.triggers import TriggerFunction, TriggerSet

revision = "0010_postings"
down_revision = "0009_lexical_stats"
branch_labels = None
depends_on = None

# the postings of the live rows of ``{rows}`` (a transition table, or memories)
_INSERT = """
      INSERT INTO lexical_postings (tenant_id, scope, lexeme, tf, dl, memory_id)
        SELECT r.tenant_id, r.scope, u.lexeme, coalesce(array_length(u.positions, 1), 1),
               r.tsv_length, r.id
        FROM {rows} r, unnest(r.tsv) u WHERE r.status = 'active' AND NOT r.archived"""

# The functions, triggers and fill, defined once: created here on plain PostgreSQL and on
# Citus shards by mnemovault.store.citus.distribute (store/migrations/triggers.py; its rules
# for a body: one statement a line-end ``;``, no control flow, so the update's "if the old
# row counted" / "if the new row counts" are conditions of the statements).
TRIGGERS = TriggerSet(
    table="memories",
    targets=("lexical_postings",),
    functions=(
        TriggerFunction("mv_postings_insert", _INSERT.format(rows="new_rows") + ";"),
        TriggerFunction("mv_postings_delete", """
      DELETE FROM lexical_postings p USING old_rows r
        WHERE r.status = 'active' AND NOT r.archived
          AND p.tenant_id = r.tenant_id AND p.memory_id = r.id;"""),
        TriggerFunction("mv_postings_update", """
      DELETE FROM lexical_postings
        WHERE tenant_id = OLD.tenant_id AND memory_id = OLD.id
          AND OLD.status = 'active' AND NOT OLD.archived;
      INSERT INTO lexical_postings (tenant_id, scope, lexeme, tf, dl, memory_id)
        SELECT NEW.tenant_id, NEW.scope, u.lexeme,
               coalesce(array_length(u.positions, 1), 1), NEW.tsv_length, NEW.id
        FROM unnest(NEW.tsv) u WHERE NEW.status = 'active' AND NOT NEW.archived;"""),
        TriggerFunction("mv_postings_truncate", """
      DELETE FROM lexical_postings;"""),
    ),
    triggers=(
        """CREATE TRIGGER memories_postings_insert AFTER INSERT ON memories
         REFERENCING NEW TABLE AS new_rows
         FOR EACH STATEMENT EXECUTE FUNCTION mv_postings_insert()""",
        """CREATE TRIGGER memories_postings_delete AFTER DELETE ON memories
         REFERENCING OLD TABLE AS old_rows
         FOR EACH STATEMENT EXECUTE FUNCTION mv_postings_delete()""",
        """CREATE TRIGGER memories_postings_update
         AFTER UPDATE OF status, archived, scope, content ON memories
         FOR EACH ROW
         WHEN (OLD.status IS DISTINCT FROM NEW.status
               OR OLD.archived IS DISTINCT FROM NEW.archived
               OR OLD.scope IS DISTINCT FROM NEW.scope
               OR OLD.content IS DISTINCT FROM NEW.content)
         EXECUTE FUNCTION mv_postings_update()""",
        """CREATE TRIGGER memories_postings_truncate AFTER TRUNCATE ON memories
         FOR EACH STATEMENT EXECUTE FUNCTION mv_postings_truncate()""",
    ),
    # what is there already (the table is empty before it on plain PostgreSQL)
    backfill=("DELETE FROM lexical_postings", _INSERT.format(rows="memories")),
)


def upgrade() -> None:
    role = context.config.attributes.get("app_role", "mnemovault_app")
    if not role.replace("_", "").isalnum():
        raise ValueError(f"unsafe role name {role!r}")
    op.execute("""
        CREATE TABLE lexical_postings (
          tenant_id text NOT NULL,
          scope     text NOT NULL,
          lexeme    text NOT NULL,
          tf        integer NOT NULL,
          dl        integer NOT NULL,
          memory_id uuid NOT NULL,
          PRIMARY KEY (tenant_id, memory_id, lexeme) INCLUDE (tf, dl)
        );
        CREATE INDEX lexical_postings_term ON lexical_postings
          (tenant_id, scope, lexeme, tf DESC, dl, memory_id);
    """)
    tenant_table(op, "lexical_postings", role, "SELECT, INSERT, DELETE", signed=True)
    if op.get_bind().exec_driver_sql(
            "SELECT 1 FROM pg_extension WHERE extname = 'citus'").first() is not None:
        # the functions only (made distributed functions, then replaced by their Citus
        # form, by mnemovault.store.citus.distribute, which also creates the triggers on
        # the shards and fills the table)
        for statement in TRIGGERS.plain_functions():
            op.execute(statement)
        return
    TRIGGERS.create(op)
    for statement in TRIGGERS.backfill:
        op.execute(statement)


def downgrade() -> None:
    op.execute("""
        DROP TRIGGER IF EXISTS memories_postings_truncate ON memories;
        DROP TRIGGER IF EXISTS memories_postings_update ON memories;
        DROP TRIGGER IF EXISTS memories_postings_delete ON memories;
        DROP TRIGGER IF EXISTS memories_postings_insert ON memories;
        DROP FUNCTION IF EXISTS mv_postings_truncate();
        DROP FUNCTION IF EXISTS mv_postings_update();
        DROP FUNCTION IF EXISTS mv_postings_delete();
        DROP FUNCTION IF EXISTS mv_postings_insert();
        DROP TABLE IF EXISTS lexical_postings;
    """)
