"""The tenant setting is signed (issue 9, fault 4: RLS cannot be escaped by any SQL).

Revision ID: 0005_signed_tenant
Revises: 0004_app_login
Create Date: 2026-12-01

Until now row-level security compared ``tenant_id`` with the plain setting
``mnemovault.tenant_id``, which any statement on an application connection could change
(``SELECT set_config('mnemovault.tenant_id', 'other', true)``). From here on the setting
holds ``<tenant>:<mac>`` where ``mac`` is hex HMAC-SHA256 (RFC 2104) of ``<tenant>:<backend
pid>`` under a key only the database owner can read (table ``mv_tenant_key``). The
policies call :sql:`mv_current_tenant()`, a SECURITY DEFINER function that recomputes the
MAC for the current backend and returns the tenant only if it matches. The application
reads the key once over its owner connection and signs each transaction's tenant; SQL on
an application connection cannot read the key, and a token seen on another backend (e.g.
in ``pg_stat_activity``) does not verify on this one. Consequence: a proxy that moves
transactions between server connections (PgBouncer in transaction mode) is not supported.

The HMAC's padded keys are stored precomputed (no pgcrypto here: plain ``sha256()``).
"""

import hashlib
import secrets

from alembic import context, op

revision = "0005_signed_tenant"
down_revision = "0004_app_login"
branch_labels = None
depends_on = None

POLICY = "tenant_id = (SELECT mv_current_tenant())"


def _set_policies(expr: str) -> None:
    """Every ``tenant_isolation`` policy: USING and WITH CHECK ``expr``."""
    op.execute(f"""
        DO $$
        DECLARE r record;
        BEGIN
          FOR r IN SELECT schemaname, tablename FROM pg_policies
                   WHERE policyname = 'tenant_isolation' LOOP
            EXECUTE format('ALTER POLICY tenant_isolation ON %I.%I USING ({expr}) '
                           'WITH CHECK ({expr})', r.schemaname, r.tablename);
          END LOOP;
        END $$""")


def _pads(key: bytes) -> tuple[bytes, bytes]:
    block = key.ljust(64, b"\x00")
    return (bytes(b ^ 0x36 for b in block), bytes(b ^ 0x5C for b in block))


def upgrade() -> None:
    role = context.config.attributes.get("app_role", "mnemovault_app")
    if not role.replace("_", "").isalnum():
        raise ValueError("app_role: must be letters, digits and underscores")
    key = secrets.token_bytes(32)
    assert len(hashlib.sha256(key).digest()) == 32
    inner, outer = _pads(key)
    op.execute("""
        CREATE TABLE mv_tenant_key (
          id        int PRIMARY KEY CHECK (id = 1),
          key       bytea NOT NULL,
          inner_pad bytea NOT NULL,
          outer_pad bytea NOT NULL
        )""")
    op.execute("REVOKE ALL ON mv_tenant_key FROM PUBLIC")
    op.execute(f"REVOKE ALL ON mv_tenant_key FROM {role}")
    op.execute(f"INSERT INTO mv_tenant_key VALUES (1, '\\x{key.hex()}'::bytea, "
               f"'\\x{inner.hex()}'::bytea, '\\x{outer.hex()}'::bytea)")
    op.execute("""
        CREATE FUNCTION mv_current_tenant() RETURNS text
        LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
        DECLARE
          tok text := current_setting('mnemovault.tenant_id', true);
          t text;
          k record;
        BEGIN
          IF tok IS NULL OR position(':' IN tok) = 0 THEN
            RETURN NULL;
          END IF;
          t := split_part(tok, ':', 1);
          SELECT inner_pad, outer_pad INTO k FROM mv_tenant_key WHERE id = 1;
          IF NOT FOUND THEN
            RETURN NULL;
          END IF;
          IF encode(sha256(k.outer_pad || sha256(k.inner_pad
                || convert_to(t || ':' || pg_backend_pid()::text, 'UTF8'))), 'hex')
             = split_part(tok, ':', 2) THEN
            RETURN t;
          END IF;
          RETURN NULL;
        END $$""")
    op.execute("REVOKE ALL ON FUNCTION mv_current_tenant() FROM PUBLIC")
    op.execute(f"GRANT EXECUTE ON FUNCTION mv_current_tenant() TO {role}")
    _set_policies(POLICY)


def downgrade() -> None:
    _set_policies("tenant_id = current_setting('mnemovault.tenant_id', true)")
    op.execute("DROP FUNCTION mv_current_tenant()")
    op.execute("DROP TABLE mv_tenant_key")
