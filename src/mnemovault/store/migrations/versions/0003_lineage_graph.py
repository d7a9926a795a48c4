"""Lineage (memory -> the memories it was derived from) and the entity graph.

Revision ID: 0003_lineage
Revises: 0003_audit
Create Date: 2026-11-30

* ``memory_lineage``: one row per (derived memory, source memory). A fact carries
  information from each of its sources, so forgetting any source forgets the fact
  (SPEC section 4). The source side has no ``ON DELETE`` action: a bare ``DELETE`` of a
  memory that something was derived from fails instead of leaving the fact behind, so the
  governed forget path (:mod:`mnemovault.governance.forget`) is the only way to remove it.
* ``graph_nodes``: one node per placeholder (or named entity when pseudonymisation is off).
  ``graph_edges``: entities mentioned in the same memory, stored once per unordered pair
  (``source_node < target_node`` in byte order, hence ``COLLATE "C"``).
* ``graph_node_support`` / ``graph_edge_support``: the memories that support each node and
  edge. A node with no support left is removed by forget; since every placeholder of every
  stored field gets a node, node support is also the index of "which records use this vault
  value", which forget needs to decide what to crypto-shred. Support rows go with their
  memory (``ON DELETE CASCADE``); nodes and edges are only removed by forget. Instead of
  per-row foreign keys from support to nodes (one trigger per row, which tripled the cost
  of a large forget), a lock protocol keeps them consistent: a writer holds ``FOR KEY
  SHARE`` on every node it supports, forget takes ``FOR UPDATE`` on the nodes it may
  remove before checking their support (see :mod:`mnemovault.governance.graph`).

All rows are written in the transaction of the memory they describe. Existing memories are
indexed here (placeholders found by regular expression in every stored free-text field).
"""

from alembic import context, op

from mnemovault.store.migrations.tenancy import tenant_table

revision = "0003_lineage"
down_revision = "0003_audit"
branch_labels = None
depends_on = None

TABLES = ("memory_lineage", "graph_nodes", "graph_node_support", "graph_edges",
          "graph_edge_support")

# ``\:`` keeps SQLAlchemy's text() from reading ``:p_`` as a bind parameter
PLACEHOLDER_PATTERN = r"\{[a-z][a-z_]{0,31}\:p_[0-9a-f]{10}\}"


def upgrade() -> None:
    role = context.config.attributes.get("app_role", "mnemovault_app")
    op.execute(
        """
        CREATE TABLE memory_lineage (
          tenant_id  text NOT NULL REFERENCES tenants (tenant_id),
          memory_id  uuid NOT NULL,
          source_id  uuid NOT NULL,
          created_at timestamptz NOT NULL DEFAULT now(),
          PRIMARY KEY (tenant_id, memory_id, source_id),
          CHECK (memory_id <> source_id),
          FOREIGN KEY (tenant_id, memory_id) REFERENCES memories (tenant_id, id)
            ON DELETE CASCADE,
          FOREIGN KEY (tenant_id, source_id) REFERENCES memories (tenant_id, id)
        );
        CREATE INDEX memory_lineage_source ON memory_lineage (tenant_id, source_id);

        CREATE TABLE graph_nodes (
          tenant_id  text NOT NULL REFERENCES tenants (tenant_id),
          node_id    text COLLATE "C" NOT NULL,
          kind       text NOT NULL,
          created_at timestamptz NOT NULL DEFAULT now(),
          PRIMARY KEY (tenant_id, node_id)
        );

        CREATE TABLE graph_node_support (
          tenant_id text NOT NULL REFERENCES tenants (tenant_id),
          node_id   text COLLATE "C" NOT NULL,
          memory_id uuid NOT NULL,
          PRIMARY KEY (tenant_id, node_id, memory_id),
          FOREIGN KEY (tenant_id, memory_id) REFERENCES memories (tenant_id, id)
            ON DELETE CASCADE
        );
        CREATE INDEX graph_node_support_memory ON graph_node_support (tenant_id, memory_id);

        CREATE TABLE graph_edges (
          tenant_id   text NOT NULL REFERENCES tenants (tenant_id),
          source_node text COLLATE "C" NOT NULL,
          target_node text COLLATE "C" NOT NULL,
          created_at  timestamptz NOT NULL DEFAULT now(),
          PRIMARY KEY (tenant_id, source_node, target_node),
          CHECK (source_node < target_node)
        );
        CREATE INDEX graph_edges_target ON graph_edges (tenant_id, target_node);

        CREATE TABLE graph_edge_support (
          tenant_id   text NOT NULL REFERENCES tenants (tenant_id),
          source_node text COLLATE "C" NOT NULL,
          target_node text COLLATE "C" NOT NULL,
          memory_id   uuid NOT NULL,
          PRIMARY KEY (tenant_id, source_node, target_node, memory_id),
          FOREIGN KEY (tenant_id, memory_id) REFERENCES memories (tenant_id, id)
            ON DELETE CASCADE
        );
        CREATE INDEX graph_edge_support_memory ON graph_edge_support (tenant_id, memory_id);

        -- every version of a key (forget takes them all), superseded ones included
        CREATE INDEX memories_scope_key ON memories (tenant_id, scope, key)
          WHERE key IS NOT NULL;
        """
    )
    for table in TABLES:
        tenant_table(op, table, role, "SELECT, INSERT, DELETE")
    # row locks (FOR KEY SHARE / FOR UPDATE) need UPDATE on a column; nothing updates nodes
    op.execute(f"GRANT UPDATE (kind) ON graph_nodes TO {role}")
    _backfill()


def _backfill() -> None:
    """Index the memories stored before this revision (as the owner: every tenant)."""
    op.execute(
        f"""
        CREATE TEMPORARY TABLE _mv_mentions ON COMMIT DROP AS
        SELECT DISTINCT m.tenant_id, m.id AS memory_id, x.ph[1] AS node_id
        FROM memories m,
             regexp_matches(concat_ws(' ', m.content, m.subject_id, m.key, m.scope,
                                      m.provenance::text),
                            '{PLACEHOLDER_PATTERN}', 'g') AS x(ph);

        INSERT INTO graph_nodes (tenant_id, node_id, kind)
        SELECT DISTINCT tenant_id, node_id,
               substring(node_id from 2 for position(':' in node_id) - 2)
        FROM _mv_mentions;

        INSERT INTO graph_node_support (tenant_id, node_id, memory_id)
        SELECT tenant_id, node_id, memory_id FROM _mv_mentions;

        INSERT INTO graph_edges (tenant_id, source_node, target_node)
        SELECT DISTINCT a.tenant_id, a.node_id, b.node_id
        FROM _mv_mentions a JOIN _mv_mentions b
          ON a.tenant_id = b.tenant_id AND a.memory_id = b.memory_id
         AND a.node_id COLLATE "C" < b.node_id COLLATE "C";

        INSERT INTO graph_edge_support (tenant_id, source_node, target_node, memory_id)
        SELECT a.tenant_id, a.node_id, b.node_id, a.memory_id
        FROM _mv_mentions a JOIN _mv_mentions b
          ON a.tenant_id = b.tenant_id AND a.memory_id = b.memory_id
         AND a.node_id COLLATE "C" < b.node_id COLLATE "C";
        """
    )


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS memories_scope_key")
    for table in reversed(TABLES):
        op.execute(f"DROP TABLE IF EXISTS {table}")
