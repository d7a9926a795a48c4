"""BM25 statistics without a row every writer of a scope locks (issue 29).

Revision ID: 0016_stat_deltas
Revises: 0015_sealed_content
Create Date: 2026-12-02

Migration 0009's triggers upsert the scope's one ``lexical_scope_stats`` row (and the
``lexical_df`` rows of its lexemes) in the transaction of every change to ``memories``:
the row stays locked until that transaction commits, so every writer of a scope waited
for the one before it to commit (with 32 clients, most of a remember's and a forget's
time was spent in ``Lock:transactionid`` on that row).

Here the triggers only *insert*: every statement that changes what counts appends its
deltas to ``lexical_stat_deltas`` (tenant, scope, lexeme, n, len, tf): one row per
(tenant, scope) with ``lexeme IS NULL`` (``n``: the change of the live document count,
``len``: of their total ``tsv_length``) and one per lexeme (``n``: the change of its
document frequency, ``tf``: the largest term frequency among the rows added, 0 for
removals). No row is shared between concurrent writers, so they never wait on each
other here. The statistics of a scope are then the base rows (0009's tables) plus the
sum of its deltas (:func:`mnemovault.store.search.lexical_stats`; the BM25 query reads
them the same way), exactly what the old triggers kept, at every snapshot: a delta
commits or rolls back with the change it counts.

:func:`mnemovault.store.lexstats.fold` folds a scope's deltas into the
base rows in one short transaction of its own (``DELETE ... RETURNING`` of the deltas it
sees, the sums added to the base rows, rows reaching 0 removed): deltas of transactions
still open are invisible to it and stay for the next fold; a fold that fails or is
killed rolls back whole (nothing lost, nothing counted twice); two folds of one scope
serialise on its base rows and the second one finds the first one's deltas gone. Writers
never touch the base rows any more, so a fold never makes a writer wait. It runs after
writes (every :data:`~mnemovault.store.lexstats.FOLD_EVERY` writes of a tenant in the
process, a write being an audited commit or each delta-appending statement of a commit
that made more, or every :data:`~mnemovault.store.lexstats.FOLD_ROWS` memories written;
skipped when another fold of the scope holds its advisory lock), at the end of an
import, after an erase and after a re-index of the terms.

The functions keep 0009's names and its triggers (which fire on the same events), so
this revision only replaces the functions' bodies. Citus: as in 0009, the triggers live
on the shards; :data:`TRIGGERS` here supersedes 0009's set (same function names:
:func:`mnemovault.store.citus.trigger_sets`), and
:func:`mnemovault.store.citus.distribute` installs its Citus form on the shards (on a
cluster that has 0009's triggers already it replaces the functions only: the base rows
are right as they are).

Recall's access statistics (issue 29) get the same treatment where a writer holds the
row: ``memory_accesses`` (tenant, memory, n, at) is append-only; recall's touch updates
the rows it can lock at once (``SKIP LOCKED``) and appends the accesses of the others,
which :func:`mnemovault.store.memories.fold_accesses` counts into ``memories`` later
(after writes, with the statistics' fold, and before the retention job scores), so a
recall never waits for a forget, supersede or archive of one of its hits (its touch
waits at most ``TOUCH_WAIT`` for a row, :func:`mnemovault.store.memories.touch`).

And the audit chain's critical section (issue 29): ``mv_audit_append`` (below) appends a
row in one statement under the head's lock, so the head is held for that statement and
the commit only, never while the application computes or waits for its turn to run
(:mod:`mnemovault.audit.log`). The chain, the row bytes and the verifier are unchanged.
"""

from alembic import context, op

from mnemovault.store.migrations.tenancy import tenant_table
from mnemovault.store.migrations.triggers import TriggerFunction, TriggerSet

revision = "0016_stat_deltas"
down_revision = "0015_sealed_content"
branch_labels = None
depends_on = None

LIVE = "status = 'active' AND NOT archived"

_COLUMNS = "lexical_stat_deltas (tenant_id, scope, lexeme, n, len, tf)"


def _statement_body(table: str, sign: str) -> str:
    """The deltas of the live rows of the transition table ``table`` (``sign`` "" for
    rows added, "-" for rows removed)."""
    tf = "max(coalesce(array_length(u.positions, 1), 1))" if not sign else "0"
    return f"""
      INSERT INTO {_COLUMNS}
        SELECT tenant_id, scope, NULL, {sign}count(*), {sign}sum(tsv_length), 0
        FROM {table} WHERE {LIVE} GROUP BY tenant_id, scope;
      INSERT INTO {_COLUMNS}
        SELECT r.tenant_id, r.scope, u.lexeme, {sign}count(*), 0, {tf}
        FROM {table} r, unnest(r.tsv) u WHERE r.status = 'active' AND NOT r.archived
        GROUP BY r.tenant_id, r.scope, u.lexeme;"""


# One row's change: minus the old row if it counted, plus the new row if it counts (a
# rewritten row that keeps a lexeme, n = 0, may hold it more often: its tf is kept).
_ROW = f"""
      INSERT INTO {_COLUMNS}
        SELECT tenant_id, scope, NULL, sum(n)::bigint, sum(len)::bigint, 0 FROM (
          SELECT OLD.tenant_id AS tenant_id, OLD.scope AS scope, -1 AS n,
                 -OLD.tsv_length AS len WHERE OLD.status = 'active' AND NOT OLD.archived
          UNION ALL
          SELECT NEW.tenant_id, NEW.scope, 1, NEW.tsv_length
            WHERE NEW.status = 'active' AND NOT NEW.archived) y
        GROUP BY tenant_id, scope HAVING sum(n) <> 0 OR sum(len) <> 0;
      INSERT INTO {_COLUMNS}
        SELECT tenant_id, scope, lexeme, sum(n)::bigint, 0, max(tf) FROM (
          SELECT OLD.tenant_id AS tenant_id, OLD.scope AS scope, u.lexeme, -1 AS n, 0 AS tf
            FROM unnest(OLD.tsv) u WHERE OLD.status = 'active' AND NOT OLD.archived
          UNION ALL
          SELECT NEW.tenant_id, NEW.scope, u.lexeme, 1,
                 coalesce(array_length(u.positions, 1), 1)
            FROM unnest(NEW.tsv) u WHERE NEW.status = 'active' AND NOT NEW.archived) y
        GROUP BY tenant_id, scope, lexeme HAVING sum(n) <> 0 OR max(tf) > 0;"""

TRIGGERS = TriggerSet(
    table="memories",
    targets=("lexical_scope_stats", "lexical_df", "lexical_stat_deltas"),
    functions=(
        TriggerFunction("mv_lexical_insert", _statement_body("new_rows", "")),
        TriggerFunction("mv_lexical_delete", _statement_body("old_rows", "-")),
        TriggerFunction("mv_lexical_update", _ROW),
        TriggerFunction("mv_lexical_truncate", """
      DELETE FROM lexical_stat_deltas;
      DELETE FROM lexical_df;
      DELETE FROM lexical_scope_stats;"""),
    ),
    # 0009's triggers, unchanged (the same events fire the new bodies)
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
    # the base rows recounted from what is there, no deltas
    backfill=("DELETE FROM lexical_stat_deltas", "DELETE FROM lexical_df",
              "DELETE FROM lexical_scope_stats", f"""
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


# Appending one audit row in one statement (issue 29): the caller sends the row's canonical
# bytes with its ``seq`` and ``ts`` left out (``p_head || seq || p_mid || ts || p_tail``);
# here, under the head's row lock, they are filled in (``ts``: the clock under the lock,
# so rows stay in time order), ``row_hash = SHA-256(prev_hash || row_bytes)``, the Merkle
# leaf ``SHA-256(0x00 || row_bytes)`` and the perfect nodes it completes (RFC 9162, as
# mnemovault.audit.merkle.CompactRange.append), and the row, its nodes and the head are
# written. The chain, its bytes and the verifier are those of mnemovault.audit.chain; the
# checkpoint (signed outside the database) is the caller's, from what this returns.
AUDIT_APPEND = r"""
CREATE OR REPLACE FUNCTION mv_audit_append(p_tenant text, p_operation text, p_head bytea,
                                           p_mid bytea, p_tail bytea, p_genesis bytea)
RETURNS TABLE (seq bigint, ts timestamptz, ts_text text, peaks bytea,
               checkpoint_size bigint, checkpoint_at timestamptz)
LANGUAGE plpgsql AS $fn$
DECLARE
  h record;
  s bigint;
  t timestamptz;
  tt text;
  rb bytea;
  rh bytea;
  nh bytea;
  pk bytea;
  lvl int := 0;
  idx bigint;
BEGIN
  SELECT a.seq, a.head_hash, a.peaks, a.checkpoint_size, a.checkpoint_at INTO h
    FROM audit_heads a WHERE a.tenant_id = p_tenant FOR UPDATE;
  IF NOT FOUND THEN
    INSERT INTO audit_heads (tenant_id, seq, head_hash) VALUES (p_tenant, 0, p_genesis)
      ON CONFLICT (tenant_id) DO NOTHING;
    SELECT a.seq, a.head_hash, a.peaks, a.checkpoint_size, a.checkpoint_at INTO h
      FROM audit_heads a WHERE a.tenant_id = p_tenant FOR UPDATE;
  END IF;
  s := h.seq + 1;
  t := date_trunc('microseconds', clock_timestamp());
  tt := to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"');
  rb := p_head || convert_to(s::text, 'UTF8') || p_mid || convert_to(tt, 'UTF8') || p_tail;
  rh := sha256(h.head_hash || rb);
  nh := sha256('\x00'::bytea || rb);
  idx := s - 1;
  pk := h.peaks;
  INSERT INTO audit_log (tenant_id, seq, ts, operation, row_bytes, prev_hash, row_hash)
    VALUES (p_tenant, s, t, p_operation, rb, h.head_hash, rh);
  INSERT INTO audit_nodes (tenant_id, level, idx, hash) VALUES (p_tenant, 0, idx, nh);
  WHILE ((idx >> lvl) & 1) = 1 LOOP
    nh := sha256('\x01'::bytea || substring(pk FROM length(pk) - 31 FOR 32) || nh);
    pk := substring(pk FROM 1 FOR length(pk) - 32);
    lvl := lvl + 1;
    INSERT INTO audit_nodes (tenant_id, level, idx, hash)
      VALUES (p_tenant, lvl, idx >> lvl, nh);
  END LOOP;
  pk := pk || nh;
  UPDATE audit_heads a SET seq = s, head_hash = rh, peaks = pk WHERE a.tenant_id = p_tenant;
  RETURN QUERY SELECT s, t, tt, pk, h.checkpoint_size, h.checkpoint_at;
END
$fn$"""


def upgrade() -> None:
    role = context.config.attributes.get("app_role", "mnemovault_app")
    if not role.replace("_", "").isalnum():
        raise ValueError(f"unsafe role name {role!r}")
    op.execute("""
        CREATE TABLE lexical_stat_deltas (
          tenant_id text NOT NULL,
          scope     text NOT NULL,
          lexeme    text,             -- NULL: the scope's document count and length
          n         bigint NOT NULL,  -- documents (lexeme NULL) or document frequency
          len       bigint NOT NULL,  -- total tsv_length (lexeme NULL; 0 otherwise)
          tf        integer NOT NULL  -- largest term frequency added (0: none)
        );
        CREATE INDEX lexical_stat_deltas_term ON lexical_stat_deltas
          (tenant_id, scope, lexeme);
    """)
    tenant_table(op, "lexical_stat_deltas", role, "SELECT, INSERT, DELETE", signed=True)
    op.execute("""
        CREATE TABLE memory_accesses (
          tenant_id text NOT NULL,
          memory_id uuid NOT NULL,
          n         integer NOT NULL,
          at        timestamptz NOT NULL
        );
        CREATE INDEX memory_accesses_tenant ON memory_accesses (tenant_id, memory_id);
    """)
    tenant_table(op, "memory_accesses", role, "SELECT, INSERT, DELETE", signed=True)
    op.execute(AUDIT_APPEND)
    if op.get_bind().exec_driver_sql(
            "SELECT 1 FROM pg_extension WHERE extname = 'citus'").first() is not None:
        # the functions there are in their Citus form: distribute replaces them (their
        # body changed) after distributing lexical_stat_deltas
        return
    for statement in TRIGGERS.plain_functions(replace=True):
        op.execute(statement)


def downgrade() -> None:
    import importlib

    old = importlib.import_module(
        "mnemovault.store.migrations.versions.0009_lexical_stats").TRIGGERS
    if op.get_bind().exec_driver_sql(
            "SELECT 1 FROM pg_extension WHERE extname = 'citus'").first() is None:
        for statement in old.plain_functions(replace=True):
            op.execute(statement)
        for statement in old.backfill:  # the base rows recounted: the deltas go with it
            op.execute(statement)
    op.execute("DROP FUNCTION IF EXISTS mv_audit_append(text, text, bytea, bytea, bytea, bytea)")
    op.execute("DROP TABLE IF EXISTS memory_accesses")
    op.execute("DROP TABLE IF EXISTS lexical_stat_deltas")
