"""Per-scope BM25 corpus statistics (issue 13).

Revision ID: 0009_lexical_stats
Revises: 0008_procedures
Create Date: 2026-12-01

BM25 needs, for one scope, the number of live documents, their total length and the
document frequency of each query term. Recomputing them on every query reads the whole
scope (about 227 ms of a 250 ms recall at 100k memories); here they are kept up to date
by the database, in the transaction of every change to ``memories``:

* ``lexical_scope_stats`` (tenant, scope) -> live document count and total length (sum of
  ``tsv_length``);
* ``lexical_df`` (tenant, scope, lexeme) -> the number of live documents of the scope that
  hold the lexeme (rows reaching 0 are removed), and the largest term frequency seen for
  it (an upper bound: deletes do not lower it), which lets the query skip documents that
  cannot reach the top (MaxScore, :func:`mnemovault.store.search.text_candidates`).

"Live" is what recall searches by default: ``status = 'active' AND NOT archived``.

Triggers on ``memories`` maintain them, so every path that writes, supersedes, archives,
restores, forgets, erases a subject or deletes a tenant keeps them right without knowing
about them: a statement-level trigger for INSERT and one for DELETE (transition tables:
one aggregate upsert per statement, however many rows), a row-level trigger for the
UPDATEs that change what counts (status, archived, scope or content; access statistics
and pins do not fire it), and TRUNCATE empties both tables. Each trigger locks the scope
rows it changes in (tenant, scope) order first and then the lexeme rows in lexeme order,
so concurrent writers of one scope queue on the scope row instead of deadlocking on
lexemes.

Citus: Citus refuses to distribute a table with triggers, and these statements cannot
run as they are in a trigger on a shard (Citus cannot route a ``FOR UPDATE`` over
``(tenant_id, scope) IN (...)``). So on a server with the ``citus`` extension this
revision creates the tables and functions but no triggers; after distributing the tables,
:func:`mnemovault.store.citus.distribute` installs :data:`TRIGGERS` on the shards (the
same statements, run on the co-located shards: :mod:`mnemovault.store.migrations.triggers`)
and recounts the statistics.
"""

from alembic import context, op

from mnemovault.store.migrations.tenancy import tenant_table
from mnemovault.store.migrations.triggers import TriggerFunction, TriggerSet

revision = "0009_lexical_stats"
down_revision = "0008_procedures"
branch_labels = None
depends_on = None

LIVE = "status = 'active' AND NOT archived"

# Applies per-(tenant, scope) deltas given by the query ``{src}`` (columns tenant_id,
# scope, n, len) and per-lexeme deltas ``{lex}`` (tenant_id, scope, lexeme, n, tf: the
# largest term frequency among the rows added): the scope
# rows are locked first, in order; increments upsert in key order, decrements update the
# rows that exist (never create one: a tenant purge may have emptied these tables first)
# and remove the rows that reach zero.
_LOCK = """
    PERFORM 1 FROM lexical_scope_stats s
      WHERE (s.tenant_id, s.scope) IN (SELECT tenant_id, scope FROM ({src}) x)
      ORDER BY s.tenant_id, s.scope FOR UPDATE;
"""
_UP = """
    INSERT INTO lexical_scope_stats AS s (tenant_id, scope, doc_count, total_length)
      SELECT tenant_id, scope, n, len FROM ({src}) x WHERE n > 0 ORDER BY tenant_id, scope
    ON CONFLICT (tenant_id, scope) DO UPDATE
      SET doc_count = s.doc_count + excluded.doc_count,
          total_length = s.total_length + excluded.total_length;
    INSERT INTO lexical_df AS d (tenant_id, scope, lexeme, df, max_tf)
      SELECT tenant_id, scope, lexeme, n, tf FROM ({lex}) x WHERE n > 0
      ORDER BY tenant_id, scope, lexeme
    ON CONFLICT (tenant_id, scope, lexeme) DO UPDATE
      SET df = d.df + excluded.df, max_tf = greatest(d.max_tf, excluded.max_tf);
"""
_DOWN = """
    UPDATE lexical_scope_stats s SET doc_count = s.doc_count + x.n,
                                     total_length = s.total_length + x.len
      FROM ({src}) x WHERE x.n <= 0 AND s.tenant_id = x.tenant_id AND s.scope = x.scope;
    UPDATE lexical_df d SET df = d.df + x.n FROM ({lex}) x
      WHERE x.n < 0 AND d.tenant_id = x.tenant_id AND d.scope = x.scope
        AND d.lexeme = x.lexeme;
    DELETE FROM lexical_df d USING ({lex}) x
      WHERE x.n < 0 AND d.df <= 0 AND d.tenant_id = x.tenant_id AND d.scope = x.scope
        AND d.lexeme = x.lexeme;
    DELETE FROM lexical_scope_stats s USING ({src}) x
      WHERE s.doc_count <= 0 AND s.tenant_id = x.tenant_id AND s.scope = x.scope;
"""


def _statement_body(table: str, sign: str) -> str:
    src = (f"SELECT tenant_id, scope, {sign}count(*) AS n, {sign}sum(tsv_length) AS len "
           f"FROM {table} WHERE {LIVE} GROUP BY tenant_id, scope")
    lex = (f"SELECT r.tenant_id, r.scope, u.lexeme, {sign}count(*) AS n, "
           f"max(coalesce(array_length(u.positions, 1), 1)) AS tf "
           f"FROM {table} r, unnest(r.tsv) u WHERE r.status = 'active' AND NOT r.archived "
           f"GROUP BY r.tenant_id, r.scope, u.lexeme")
    body = _LOCK + (_DOWN if sign else _UP)
    return body.format(src=src, lex=lex)


# One row's change: minus the old row if it counted, plus the new row if it counts.
_ROW_SRC = """
    SELECT tenant_id, scope, sum(n)::bigint AS n, sum(len)::bigint AS len FROM (
      SELECT OLD.tenant_id AS tenant_id, OLD.scope AS scope, -1 AS n, -OLD.tsv_length AS len
        WHERE OLD.status = 'active' AND NOT OLD.archived
      UNION ALL
      SELECT NEW.tenant_id, NEW.scope, 1, NEW.tsv_length
        WHERE NEW.status = 'active' AND NOT NEW.archived) y
    GROUP BY tenant_id, scope
"""
_ROW_LEX = """
    SELECT tenant_id, scope, lexeme, sum(n)::bigint AS n, max(tf) AS tf FROM (
      SELECT OLD.tenant_id AS tenant_id, OLD.scope AS scope, u.lexeme, -1 AS n, 0 AS tf
        FROM unnest(OLD.tsv) u WHERE OLD.status = 'active' AND NOT OLD.archived
      UNION ALL
      SELECT NEW.tenant_id, NEW.scope, u.lexeme, 1, coalesce(array_length(u.positions, 1), 1)
        FROM unnest(NEW.tsv) u WHERE NEW.status = 'active' AND NOT NEW.archived) y
    GROUP BY tenant_id, scope, lexeme
"""

# a rewritten row that keeps a lexeme (n = 0) may hold it more often than before
_ROW_TF = """
    UPDATE lexical_df d SET max_tf = x.tf FROM ({lex}) x
      WHERE x.n = 0 AND x.tf > d.max_tf AND d.tenant_id = x.tenant_id AND d.scope = x.scope
        AND d.lexeme = x.lexeme;
"""


# The functions, triggers and recount, defined once: created here on plain PostgreSQL and
# on Citus shards by mnemovault.store.citus.distribute (store/migrations/triggers.py).
TRIGGERS = TriggerSet(
    table="memories",
    targets=("lexical_scope_stats", "lexical_df"),
    functions=(
        TriggerFunction("mv_lexical_insert", _statement_body("new_rows", "")),
        TriggerFunction("mv_lexical_delete", _statement_body("old_rows", "-")),
        TriggerFunction("mv_lexical_update",
                        (_LOCK + _UP + _DOWN + _ROW_TF).format(src=_ROW_SRC, lex=_ROW_LEX)),
        TriggerFunction("mv_lexical_truncate", """
      DELETE FROM lexical_df;
      DELETE FROM lexical_scope_stats;"""),
    ),
    triggers=("""
        CREATE TRIGGER memories_lexical_insert AFTER INSERT ON memories
          REFERENCING NEW TABLE AS new_rows
          FOR EACH STATEMENT EXECUTE FUNCTION mv_lexical_insert()""", """
        CREATE TRIGGER memories_lexical_delete AFTER DELETE ON memories
          REFERENCING OLD TABLE AS old_rows
          FOR EACH STATEMENT EXECUTE FUNCTION mv_lexical_delete()""", """
        CREATE TRIGGER memories_lexical_update
          AFTER UPDATE OF status, archived, scope, content ON memories
          FOR EACH ROW
          WHEN (OLD.status IS DISTINCT FROM NEW.status
                OR OLD.archived IS DISTINCT FROM NEW.archived
                OR OLD.scope IS DISTINCT FROM NEW.scope
                OR OLD.content IS DISTINCT FROM NEW.content)
          EXECUTE FUNCTION mv_lexical_update()""", """
        CREATE TRIGGER memories_lexical_truncate AFTER TRUNCATE ON memories
          FOR EACH STATEMENT EXECUTE FUNCTION mv_lexical_truncate()"""),
    # what is there already (both tables are empty before it)
    backfill=("DELETE FROM lexical_df", "DELETE FROM lexical_scope_stats", f"""
        INSERT INTO lexical_scope_stats (tenant_id, scope, doc_count, total_length)
          SELECT tenant_id, scope, count(*), sum(tsv_length) FROM memories
          WHERE {LIVE} GROUP BY tenant_id, scope""", """
        INSERT INTO lexical_df (tenant_id, scope, lexeme, df, max_tf)
          SELECT m.tenant_id, m.scope, u.lexeme, count(*),
                 max(coalesce(array_length(u.positions, 1), 1))
          FROM memories m, unnest(m.tsv) u
          WHERE m.status = 'active' AND NOT m.archived GROUP BY m.tenant_id, m.scope, u.lexeme
    """),
)


def upgrade() -> None:
    role = context.config.attributes.get("app_role", "mnemovault_app")
    if not role.replace("_", "").isalnum():
        raise ValueError(f"unsafe role name {role!r}")
    op.execute("""
        CREATE TABLE lexical_scope_stats (
          tenant_id    text NOT NULL,
          scope        text NOT NULL,
          doc_count    bigint NOT NULL,
          total_length bigint NOT NULL,
          PRIMARY KEY (tenant_id, scope)
        );
        CREATE TABLE lexical_df (
          tenant_id text NOT NULL,
          scope     text NOT NULL,
          lexeme    text NOT NULL,
          df        bigint NOT NULL,
          max_tf    integer NOT NULL,  -- an upper bound: never lowered by deletes
          PRIMARY KEY (tenant_id, scope, lexeme)
        );
    """)
    for table in ("lexical_scope_stats", "lexical_df"):
        tenant_table(op, table, role, "SELECT, INSERT, UPDATE, DELETE", signed=True)
    for statement in TRIGGERS.plain_functions():
        op.execute(statement)
    if op.get_bind().exec_driver_sql(
            "SELECT 1 FROM pg_extension WHERE extname = 'citus'").first() is not None:
        # Citus refuses to distribute a table with triggers (unless
        # citus.enable_unsafe_triggers), and these statements cannot run there as they are:
        # mnemovault.store.citus.distribute installs TRIGGERS on the shards after
        # distributing the tables
        return
    for statement in TRIGGERS.triggers:
        op.execute(statement)
    for statement in TRIGGERS.backfill:
        op.execute(statement)


def downgrade() -> None:
    op.execute("""
        DROP TRIGGER IF EXISTS memories_lexical_truncate ON memories;
        DROP TRIGGER IF EXISTS memories_lexical_update ON memories;
        DROP TRIGGER IF EXISTS memories_lexical_delete ON memories;
        DROP TRIGGER IF EXISTS memories_lexical_insert ON memories;
        DROP FUNCTION IF EXISTS mv_lexical_truncate();
        DROP FUNCTION IF EXISTS mv_lexical_update();
        DROP FUNCTION IF EXISTS mv_lexical_delete();
        DROP FUNCTION IF EXISTS mv_lexical_insert();
        DROP TABLE IF EXISTS lexical_df;
        DROP TABLE IF EXISTS lexical_scope_stats;
    """)
