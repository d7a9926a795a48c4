"""Valid time on memories: when each version of a fact held (issue 23, item 2).

Revision ID: 0019_valid_time
Revises: 0018_pii_watch
Create Date: 2026-12-02

``memories.valid_from`` / ``valid_to`` (timestamptz): the half-open interval
``[valid_from, valid_to)`` of world time during which a version was the true one
(``valid_to`` NULL: still true). The rules that keep them are in
:mod:`mnemovault.memories.valid_time`; an ``as_of`` recall reads them
(:mod:`mnemovault.visibility`, purpose ``as_of``).

Backfill: every row's ``valid_from`` is its ``created_at``. A superseded version that was
once current (not a displaced or rejected review proposal) ends where its successor
begins: the next version of its key (same tenant, scope and key, by version number) among
the versions that were ever current, or, where a later version is dated earlier still (an
import with an old ``created_at``), the earliest start of any later version, so no two
intervals overlap; never before its own start (an empty interval, ``valid_to =
valid_from``, rather than an inverted one). A keyless superseded version (a procedure's)
ends at its earliest approved child's ``valid_from``. Displaced and rejected proposals
were never true: empty intervals. A superseded row still without an end (no successor
found) ends at its ``updated_at`` (when it was superseded). After this revision every
``superseded`` row has a ``valid_to``.

The index ``memories_valid_time`` (tenant, scope, valid_from) carrying ``valid_to`` and
``status`` keeps the interval filter of an ``as_of`` recall an index range scan.

Citus: plain ``ALTER TABLE ... ADD COLUMN`` and ``CREATE INDEX`` (both propagate to the
shards), and ``UPDATE``s whose joins are on ``tenant_id`` and ``id`` of the same
(distributed) table, with window functions partitioned by ``tenant_id``: all pushed down
to each shard. No correlated subquery in a ``SET`` clause, no function that is not
immutable in an ``UPDATE`` of a distributed table.
"""

from alembic import op

revision = "0019_valid_time"
down_revision = "0018_pii_watch"
branch_labels = None
depends_on = None

# the versions of a key that were ever current (review proposals never approved excluded)
_EVER_CURRENT = ("status IN ('active', 'superseded') AND "
                 "coalesce(provenance ->> 'review', 'approved') = 'approved'")


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE memories ADD COLUMN valid_from timestamptz;
        ALTER TABLE memories ADD COLUMN valid_to timestamptz;
        """
    )
    op.execute("UPDATE memories SET valid_from = created_at")
    op.execute(
        f"""
        UPDATE memories m SET valid_to = greatest(s.next_from, m.valid_from)
        FROM (SELECT tenant_id, id, min(valid_from) OVER (
                  PARTITION BY tenant_id, scope, key ORDER BY version, id
                  ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING) AS next_from
              FROM memories WHERE key IS NOT NULL AND {_EVER_CURRENT}) s
        WHERE m.tenant_id = s.tenant_id AND m.id = s.id AND m.status = 'superseded'
          AND s.next_from IS NOT NULL
        """
    )
    op.execute(
        f"""
        UPDATE memories m SET valid_to = greatest(c.first_from, m.valid_from)
        FROM (SELECT tenant_id, parent_id, min(valid_from) AS first_from FROM memories
              WHERE parent_id IS NOT NULL AND {_EVER_CURRENT}
              GROUP BY tenant_id, parent_id) c
        WHERE m.tenant_id = c.tenant_id AND m.id = c.parent_id AND m.key IS NULL
          AND m.status = 'superseded' AND m.valid_to IS NULL
        """
    )
    op.execute(
        """
        UPDATE memories SET valid_to = valid_from
        WHERE status = 'superseded' AND provenance ->> 'review' IN ('displaced', 'rejected')
        """
    )
    op.execute(
        """
        UPDATE memories SET valid_to = greatest(updated_at, valid_from)
        WHERE status = 'superseded' AND valid_to IS NULL
        """
    )
    op.execute(
        """
        CREATE INDEX memories_valid_time ON memories (tenant_id, scope, valid_from)
          INCLUDE (valid_to, status);
        """
    )


def downgrade() -> None:
    op.execute(
        """
        DROP INDEX IF EXISTS memories_valid_time;
        ALTER TABLE memories DROP COLUMN valid_to;
        ALTER TABLE memories DROP COLUMN valid_from;
        """
    )
