"""Core schema: tenants, API keys, memories, outbox, audit rows; row-level security.

Revision ID: 0001
Revises:
Create Date: 2026-11-30

Rules (DESIGN.md, Storage): ``tenant_id`` leads every primary key and B-tree index; the
HNSW index has one column (tenant and scope are filters); no extension beyond ``vector``;
every tenant table has row-level security keyed on the per-transaction setting
``mnemovault.tenant_id``; the application role is neither superuser nor BYPASSRLS.
"""

from alembic import context, op

from mnemovault.store.migrations.tenancy import tenant_table

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TENANT_TABLES = ("tenants", "api_keys", "memories", "outbox", "audit_heads", "audit_log")


def upgrade() -> None:
    attrs = context.config.attributes
    dim = int(attrs.get("embedding_dim", 384))
    role = attrs.get("app_role", "mnemovault_app")
    if not role.replace("_", "").isalnum():
        raise ValueError("app_role: must be letters, digits and underscores")

    op.execute("CREATE EXTENSION IF NOT EXISTS vector")
    op.execute(
        f"""
        DO $$
        BEGIN
          IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{role}') THEN
            CREATE ROLE {role} NOLOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
          END IF;
          BEGIN
            EXECUTE format('GRANT {role} TO %I', current_user);
          EXCEPTION WHEN others THEN NULL;
          END;
        END $$;
        """
    )

    op.execute(
        """
        CREATE TABLE mv_meta (
          key   text PRIMARY KEY,
          value jsonb NOT NULL
        );

        CREATE TABLE tenants (
          tenant_id    text PRIMARY KEY
                       CHECK (tenant_id ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
          created_at   timestamptz NOT NULL DEFAULT now(),
          deleted_at   timestamptz,
          delete_after timestamptz
        );

        CREATE TABLE api_keys (
          tenant_id    text NOT NULL REFERENCES tenants (tenant_id),
          key_id       uuid NOT NULL,
          key_hash     bytea NOT NULL,
          role         text NOT NULL CHECK (role IN ('owner', 'admin', 'member', 'service')),
          name         text,
          permissions  text[],
          scope        text,
          subject_id   text,
          created_at   timestamptz NOT NULL DEFAULT now(),
          last_used_at timestamptz,
          revoked_at   timestamptz,
          PRIMARY KEY (tenant_id, key_id)
        );
        """
    )
    op.execute(
        f"""
        CREATE TABLE memories (
          tenant_id        text NOT NULL REFERENCES tenants (tenant_id),
          id               uuid NOT NULL,
          scope            text NOT NULL,
          subject_id       text,
          type             text NOT NULL CHECK (type IN ('episode', 'fact', 'procedure')),
          content          text NOT NULL,
          key              text,
          embedding        vector({dim}) NOT NULL,
          tsv              tsvector GENERATED ALWAYS AS (to_tsvector('english', content)) STORED,
          tsv_length       integer GENERATED ALWAYS AS
                           (length(to_tsvector('english', content))) STORED,
          pinned           boolean NOT NULL DEFAULT false,
          archived         boolean NOT NULL DEFAULT false,
          status           text NOT NULL DEFAULT 'active'
                           CHECK (status IN ('active', 'pending_review', 'superseded')),
          created_at       timestamptz NOT NULL DEFAULT now(),
          updated_at       timestamptz NOT NULL DEFAULT now(),
          last_accessed_at timestamptz,
          access_count     integer NOT NULL DEFAULT 0,
          provenance       jsonb NOT NULL DEFAULT '{{}}'::jsonb,
          parent_id        uuid,
          version          integer NOT NULL DEFAULT 1,
          PRIMARY KEY (tenant_id, id)
        );
        CREATE INDEX memories_scope_id ON memories (tenant_id, scope, id);
        CREATE INDEX memories_scope_created ON memories (tenant_id, scope, created_at DESC);
        CREATE INDEX memories_subject ON memories (tenant_id, subject_id, scope);
        CREATE INDEX memories_parent ON memories (tenant_id, parent_id) WHERE parent_id IS NOT NULL;
        CREATE UNIQUE INDEX memories_live_key ON memories (tenant_id, scope, key)
          WHERE key IS NOT NULL AND status <> 'superseded';
        CREATE INDEX memories_tsv ON memories USING gin (tsv);
        CREATE INDEX memories_embedding ON memories USING hnsw (embedding vector_cosine_ops);
        """
    )
    op.execute(
        """
        CREATE TABLE outbox (
          tenant_id    text NOT NULL REFERENCES tenants (tenant_id),
          id           bigint GENERATED ALWAYS AS IDENTITY,
          kind         text NOT NULL,
          payload      jsonb NOT NULL DEFAULT '{}'::jsonb,
          created_at   timestamptz NOT NULL DEFAULT now(),
          processed_at timestamptz,
          attempts     integer NOT NULL DEFAULT 0,
          PRIMARY KEY (tenant_id, id)
        );
        CREATE INDEX outbox_pending ON outbox (tenant_id, id) WHERE processed_at IS NULL;

        -- One head row per tenant, locked by each append: serialises writers so the
        -- chain never forks.
        CREATE TABLE audit_heads (
          tenant_id text PRIMARY KEY REFERENCES tenants (tenant_id),
          seq       bigint NOT NULL,
          head_hash bytea NOT NULL
        );

        -- Append-only: the application role may INSERT and SELECT, never UPDATE or DELETE.
        CREATE TABLE audit_log (
          tenant_id  text NOT NULL REFERENCES tenants (tenant_id),
          seq        bigint NOT NULL,
          ts         timestamptz NOT NULL,
          operation  text NOT NULL,
          row_bytes  bytea NOT NULL,
          prev_hash  bytea NOT NULL,
          row_hash   bytea NOT NULL,
          PRIMARY KEY (tenant_id, seq)
        );
        """
    )

    for table in TENANT_TABLES:
        tenant_table(op, table, role, None)
    op.execute(f"GRANT USAGE ON SCHEMA public TO {role}")
    op.execute(f"GRANT SELECT ON mv_meta TO {role}")
    op.execute(f"GRANT SELECT, INSERT, UPDATE ON tenants TO {role}")
    op.execute(f"GRANT SELECT, INSERT, UPDATE ON api_keys TO {role}")
    op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON memories TO {role}")
    op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON outbox TO {role}")
    op.execute(f"GRANT SELECT, INSERT, UPDATE ON audit_heads TO {role}")
    op.execute(f"GRANT SELECT, INSERT ON audit_log TO {role}")


def downgrade() -> None:
    for table in ("audit_log", "audit_heads", "outbox", "memories", "api_keys", "tenants",
                  "mv_meta"):
        op.execute(f"DROP TABLE IF EXISTS {table}")
