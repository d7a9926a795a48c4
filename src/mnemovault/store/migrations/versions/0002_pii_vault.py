"""PII vault: tenant secrets, vault entries (placeholder -> ciphertext), wrapped data keys.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30

Wrapped DEKs live apart from ciphertexts (``pii_deks`` vs ``pii_values``) so that one value
can be destroyed alone; a shredded entry keeps only its placeholder, kind and time (a
tombstone, so the placeholder is never given to another value).
"""

from alembic import context, op

from mnemovault.store.migrations.tenancy import tenant_table

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

TABLES = ("pii_tenant_keys", "pii_values", "pii_deks")


def upgrade() -> None:
    role = context.config.attributes.get("app_role", "mnemovault_app")
    op.execute(
        """
        CREATE TABLE pii_tenant_keys (
          tenant_id      text PRIMARY KEY REFERENCES tenants (tenant_id),
          kek_version    integer NOT NULL,
          nonce          bytea NOT NULL,
          wrapped_secret bytea NOT NULL,
          created_at     timestamptz NOT NULL DEFAULT now()
        );

        CREATE TABLE pii_values (
          tenant_id   text NOT NULL REFERENCES tenants (tenant_id),
          placeholder text NOT NULL,
          kind        text NOT NULL,
          fingerprint bytea,
          ntokens     integer,
          head        bytea,
          nonce       bytea,
          ciphertext  bytea,
          created_at  timestamptz NOT NULL DEFAULT now(),
          shredded_at timestamptz,
          PRIMARY KEY (tenant_id, placeholder),
          CHECK ((shredded_at IS NULL) = (ciphertext IS NOT NULL AND fingerprint IS NOT NULL))
        );
        CREATE UNIQUE INDEX pii_values_fingerprint ON pii_values (tenant_id, fingerprint)
          WHERE fingerprint IS NOT NULL;

        CREATE TABLE pii_deks (
          tenant_id   text NOT NULL REFERENCES tenants (tenant_id),
          placeholder text NOT NULL,
          kek_version integer NOT NULL,
          nonce       bytea NOT NULL,
          wrapped_dek bytea NOT NULL,
          PRIMARY KEY (tenant_id, placeholder)
        );
        CREATE INDEX pii_deks_kek_version ON pii_deks (tenant_id, kek_version);
        """
    )
    for table in TABLES:
        tenant_table(op, table, role, "SELECT, INSERT, UPDATE, DELETE")


def downgrade() -> None:
    for table in reversed(TABLES):
        op.execute(f"DROP TABLE IF EXISTS {table}")
