"""The PII watch's state (SPEC section 3, issue 23 item 4): which vault values it has
covered, and what each run scanned.

Revision ID: 0018_pii_watch
Revises: 0017_sealed_provenance
Create Date: 2026-12-02

``pii_values.watch_seen_at``: when a watch run first saw the value committed (NULL: no
run has seen it yet); ``pii_values.watched_at``: when a run finished covering it (NULL:
pending). A value is finished by a run that starts at least the settle time
(``MNEMOVAULT_PII_WATCH_SETTLE_SECONDS``) after the run that first saw it, so a write that
was under way when the value was created (its known-entity index loaded before the value
existed) has committed and been scanned (:mod:`mnemovault.pii.watch`). Values stored
before this revision are pending: the first run covers the backlog. The partial index
finds a tenant's pending values without reading the rest of its vault.

``memories_not_live``: the memories that have no postings (pending review, superseded,
archived: migration 0010 posts live rows only), whose keyed terms the watch matches in
their ``tsv`` (without it, a scan of every memory of the tenant).

``pii_watch_runs``: one row per (non-dry) run and tenant: when it ran and what it
scanned (values, candidate records, records opened, rewritten, deferred). Counts and
times only.
"""

from alembic import context, op

from mnemovault.store.migrations.tenancy import tenant_table

revision = "0018_pii_watch"
down_revision = "0017_sealed_provenance"
branch_labels = None
depends_on = None


def upgrade() -> None:
    role = context.config.attributes.get("app_role", "mnemovault_app")
    if not role.replace("_", "").isalnum():
        raise ValueError(f"unsafe role name {role!r}")
    op.execute("""
        ALTER TABLE pii_values ADD COLUMN watch_seen_at timestamptz;
        ALTER TABLE pii_values ADD COLUMN watched_at timestamptz;
        CREATE INDEX pii_values_watch_pending ON pii_values (tenant_id, created_at)
          WHERE watched_at IS NULL AND fingerprint IS NOT NULL;
        CREATE INDEX memories_not_live ON memories (tenant_id, id)
          WHERE status <> 'active' OR archived;
        CREATE TABLE pii_watch_runs (
          tenant_id   text NOT NULL,
          run_id      uuid NOT NULL,
          started_at  timestamptz NOT NULL,
          finished_at timestamptz NOT NULL DEFAULT now(),
          full_scan   boolean NOT NULL DEFAULT false,
          values_scanned integer NOT NULL,
          values_done    integer NOT NULL,
          candidates  integer NOT NULL,
          opened      integer NOT NULL,
          rewritten   integer NOT NULL,
          deferred    integer NOT NULL,
          batches     integer NOT NULL,
          PRIMARY KEY (tenant_id, run_id)
        );
    """)
    tenant_table(op, "pii_watch_runs", role, "SELECT, INSERT, DELETE", signed=True)


def downgrade() -> None:
    op.execute("""
        DROP TABLE IF EXISTS pii_watch_runs;
        DROP INDEX IF EXISTS pii_values_watch_pending;
        DROP INDEX IF EXISTS memories_not_live;
        ALTER TABLE pii_values DROP COLUMN IF EXISTS watched_at;
        ALTER TABLE pii_values DROP COLUMN IF EXISTS watch_seen_at;
    """)
